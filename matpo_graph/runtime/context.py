"""One agent's growing context: token ids, loss mask and logprobs kept aligned with its messages.

Every change goes through this class, so the invariants hold by construction: the loss mask is 1
exactly on sampled tokens, logprobs are the sampling logprobs there and 0.0 elsewhere, and the ids are
the chat template of :attr:`messages` with the sampled tokens substituted for their decoded text (see
:mod:`matpo_graph.runtime.chat`). A checkpoint is taken after every closed step, so the latest
messages can be dropped again when the context must shrink for a closing summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matpo_graph.core.rollout import ChatMessage
from matpo_graph.runtime.chat import ChatTokenizer
from matpo_graph.runtime.policy import Generation

__all__ = ["Checkpoint", "ContextBuilder"]


@dataclass(frozen=True)
class Checkpoint:
    num_ids: int
    num_messages: int
    pending_closing: str


class ContextBuilder:
    """Token-in, token-out context of one trajectory."""

    def __init__(self, chat: ChatTokenizer, messages: Sequence[ChatMessage]) -> None:
        self.chat = chat
        self.messages: list[ChatMessage] = list(messages)
        self.token_ids: list[int] = chat.prompt_ids([_plain(m) for m in self.messages])
        self.loss_mask: list[int] = [0] * len(self.token_ids)
        self.logprobs: list[float] = [0.0] * len(self.token_ids)
        self.prompt_length: int | None = None
        self._pending_closing = ""
        self.checkpoints: list[Checkpoint] = [self._checkpoint()]

    def __len__(self) -> int:
        return len(self.token_ids)

    def _checkpoint(self) -> Checkpoint:
        return Checkpoint(len(self.token_ids), len(self.messages), self._pending_closing)

    def _extend(self, ids: Sequence[int], *, trained: bool, logprobs: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if trained else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    # -- what the next generation sees -------------------------------------------------------------

    def generation_prompt(self, extra: Sequence[ChatMessage] = ()) -> list[int]:
        """Ids the policy continues from: the context (plus optional `extra` messages) and the generation prompt."""
        ids = list(self.token_ids)
        if extra:
            ids += self.chat.append_ids([_plain(m) for m in extra], pending_closing=self._pending_closing)
        elif self._pending_closing:
            # Two assistant turns in a row do not happen here; close the previous one anyway.
            ids += self.chat.encode(self._pending_closing)
        return ids + self.chat.generation_prompt_ids

    def prompt_tokens(self, extra: Sequence[ChatMessage] = ()) -> int:
        return len(self.generation_prompt(extra))

    # -- growing -------------------------------------------------------------------------------------

    def add_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Append injected messages (tool results, instructions): never trained."""
        if not messages:
            return
        ids = self.chat.append_ids([_plain(m) for m in messages], pending_closing=self._pending_closing)
        self._pending_closing = ""
        self._extend(ids, trained=False)
        self.messages.extend(messages)
        self.checkpoints.append(self._checkpoint())

    def add_generation(self, generation: Generation) -> str:
        """Append the generation prompt (not trained) and the sampled tokens (trained); returns the turn's text."""
        if len(generation.logprobs) != len(generation.token_ids):
            raise ValueError(
                f"policy returned {len(generation.token_ids)} token ids but {len(generation.logprobs)} logprobs"
            )
        if self._pending_closing:
            self._extend(self.chat.encode(self._pending_closing), trained=False)
        self._extend(self.chat.generation_prompt_ids, trained=False)
        if self.prompt_length is None:
            self.prompt_length = len(self.token_ids)
        self._extend(generation.token_ids, trained=True, logprobs=[float(x) for x in generation.logprobs])
        text = self.chat.assistant_content(generation.token_ids)
        self.messages.append(ChatMessage(role="assistant", content=text, trained=True, kind="generated"))
        self._pending_closing = self.chat.closing_after(generation.token_ids)
        self.checkpoints.append(self._checkpoint())
        return text

    # -- shrinking -----------------------------------------------------------------------------------

    def rollback(self, checkpoint: Checkpoint) -> int:
        """Drop everything after `checkpoint`; returns how many messages were dropped."""
        if checkpoint not in self.checkpoints:
            raise ValueError("unknown checkpoint")
        dropped = len(self.messages) - checkpoint.num_messages
        del self.token_ids[checkpoint.num_ids :]
        del self.loss_mask[checkpoint.num_ids :]
        del self.logprobs[checkpoint.num_ids :]
        del self.messages[checkpoint.num_messages :]
        self._pending_closing = checkpoint.pending_closing
        self.checkpoints = [c for c in self.checkpoints if c.num_ids <= checkpoint.num_ids]
        if self.prompt_length is not None and self.prompt_length > len(self.token_ids):
            self.prompt_length = None
        return dropped

    def fit_for(self, extra: Sequence[ChatMessage], limit: int) -> bool:
        """Drop the latest messages until the context plus `extra` and a generation prompt fit in `limit` tokens.

        Returns False (and changes nothing) when not even the initial prompt fits.
        """
        for cp in reversed(self.checkpoints):
            tail = self.chat.append_ids([_plain(m) for m in extra], pending_closing=cp.pending_closing) if extra else []
            if cp.num_ids + len(tail) + len(self.chat.generation_prompt_ids) <= limit:
                if cp.num_ids < len(self.token_ids):
                    self.rollback(cp)
                return True
        return False

    @property
    def final_prompt_length(self) -> int:
        return self.prompt_length if self.prompt_length is not None else len(self.token_ids)


def _plain(m: ChatMessage) -> dict[str, str]:
    return {"role": m.role, "content": m.content}
