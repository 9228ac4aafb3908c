"""The model's chat template as token-id pieces, so contexts grow by appending ids, never by re-tokenising.

A trajectory is built incrementally: prompt ids, then per turn the generation prompt, the tokens the
policy sampled (kept exactly) and the ids of the messages injected afterwards. The ids of injected
messages are the *template's own* rendering of them, computed by difference: the template is rendered
for a fixed dummy conversation with and without the new messages, and the extra text is tokenised.

So a trajectory's ids equal ``tokenizer(apply_chat_template(messages))`` for its message list, with
these intended differences:

- an assistant turn holds the tokens the policy sampled, which may differ from the tokenisation of
  their decoded text (the sampled ones are what the logprobs belong to);
- a trajectory ends on its last sampled token: the text the template writes after an end-of-turn token
  (``"\n"`` for ChatML) is only added when another message follows;
- a turn that stopped without its end-of-turn token (``max_tokens``) gets the template's closing
  appended, untrained, before the next message.

Requirement on the template: rendering a conversation must extend the rendering of any prefix of it
(true of ChatML templates such as SmolLM2's and Qwen2.5's); checked on construction, with a clear error.
Templates that strip reasoning from earlier assistant turns (Qwen3's, which also writes an empty
``<think></think>`` before the last assistant reply) are handled: appended messages are located after the
last assistant reply's own text, and a trajectory keeps the tokens that were sampled, reasoning included
(as veRL's token-in, token-out agent loops do), rather than the template's re-rendering of old turns.

Native tool calling: :meth:`ChatTokenizer.with_tools` gives a tokenizer whose renderings pass the role's
tools to ``apply_chat_template(tools=...)``, so the template writes its own tool section; and
:meth:`ChatTokenizer.native_dialect` says how that template's model writes calls. When, in addition, each message renders on its own and starts with a
special token (checked too), message ids are cached per message, so the shared system prompts of a
group are tokenised once.
"""

from __future__ import annotations

import json as _json
import re as _re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ChatTemplateError", "ChatTokenizer", "Message"]

_EMPTY_THINK = _re.compile(r"^\s*<think>\s*</think>\s*$", _re.IGNORECASE)

Message = Mapping[str, str]

_MARK = "MATPOMARK"  # content of the dummy assistant message, located in the rendered text
_DUMMY: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "dummy system"},
    {"role": "user", "content": "dummy user"},
    {"role": "assistant", "content": _MARK},
)


class ChatTemplateError(ValueError):
    """The chat template cannot be applied incrementally."""


@dataclass(frozen=True)
class _Pieces:
    generation_prompt: str  # text the template adds before an assistant reply
    closing: str  # text the template puts after an assistant reply's content


class ChatTokenizer:
    """A HuggingFace tokenizer plus the incremental chat-template operations the executor needs."""

    def __init__(self, tokenizer: Any, *, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.hf = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat template; an instruct/chat model is needed")
        self.tools: list[dict[str, Any]] | None = [dict(t) for t in tools] if tools else None
        self._with_tools: dict[str, ChatTokenizer] = {}
        eos = getattr(tokenizer, "eos_token_id", None)
        ids = {eos} if isinstance(eos, int) else set(eos or [])
        self.eos_token_ids: frozenset[int] = frozenset(ids)
        # Contexts of one group share their prompts: encoding is cached by text (bounded, LRU).
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._cache_size = 4096
        self._texts: OrderedDict[tuple[bool, str, str], str] = OrderedDict()
        self._pieces = self._probe()
        self._dummy_text = self.render(_DUMMY)
        # With tools, templates group consecutive tool results into one block: render appends as a whole.
        self.per_message = self.tools is None and self._probe_per_message()
        self.generation_prompt_ids: list[int] = self.encode(self._pieces.generation_prompt)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ChatTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(path)))

    # -- plain text <-> ids -------------------------------------------------------------------------

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> str:
        extra: dict[str, Any] = {"tools": self.tools} if self.tools else {}
        return self.hf.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )

    # -- native tool calling --------------------------------------------------------------------------

    def with_tools(self, tools: Sequence[Mapping[str, Any]]) -> ChatTokenizer:
        """A tokenizer rendering through the template with these tools (OpenAI function format); cached.

        Raises:
            ChatTemplateError: the template defines no tools (it ignores ``tools``).
        """
        self.native_dialect()  # refuse templates without tools first, with the clear message
        key = _json.dumps(list(tools), sort_keys=True)
        hit = self._with_tools.get(key)
        if hit is None:
            hit = ChatTokenizer(self.hf, tools=tools) if tools else self
            self._with_tools[key] = hit
        return hit

    def native_dialect(self) -> str:
        """How this template's model writes tool calls: ``hermes`` (``<tool_call>`` tags: Qwen2.5, Qwen3) or
        ``llama3_json`` (a JSON object with name and parameters: Llama 3.x).

        Raises:
            ChatTemplateError: the template defines no tools, or its call format is not one of those.
        """
        template = str(self.hf.chat_template)
        if "tools" not in template:
            raise ChatTemplateError(
                "tool_call_format native needs a chat template that defines tools (apply_chat_template(tools=...)); "
                "this model's template ignores them: use tool_call_format hermes or xml")
        if "<tool_call>" in template:
            return "hermes"
        if "<|python_tag|>" in template or "ipython" in template or '"parameters"' in template:
            return "llama3_json"
        raise ChatTemplateError("the chat template defines tools, but in a call format matpo-graph does not read "
                                "(known: <tool_call> tags as Qwen's, JSON with name/parameters as Llama 3.x's)")

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (special-token markup becomes special ids; nothing is added)."""
        if not text:
            return []
        hit = self._cache.get(text)
        if hit is not None:
            self._cache.move_to_end(text)
            return list(hit)
        ids = tuple(self.hf.encode(text, add_special_tokens=False))
        _put(self._cache, text, ids, self._cache_size)
        return list(ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def template_ids(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> list[int]:
        """What the chat template gives for a whole message list (the reference for checks)."""
        return self.encode(self.render(messages, add_generation_prompt=add_generation_prompt))

    # -- incremental pieces ---------------------------------------------------------------------------

    def _probe(self) -> _Pieces:
        closed = self.render(_DUMMY[:2])
        open_ = self.render(_DUMMY[:2], add_generation_prompt=True)
        full = self.render(_DUMMY)
        if not open_.startswith(closed) or not full.startswith(open_):
            raise ChatTemplateError(
                "the chat template does not render conversations by extension (prefix check failed)"
            )
        at = full.rfind(_MARK)
        gap = full[len(open_) : at] if at >= 0 else None
        # An empty reasoning block that the template writes before the last reply (Qwen3) is the model's to
        # write or skip when it generates: the generation prompt stays as the template ends it.
        if gap is None or (gap != "" and not _EMPTY_THINK.match(gap)):
            raise ChatTemplateError(
                "the chat template changes assistant content or its header; cannot append tokens safely"
            )
        return _Pieces(generation_prompt=open_[len(closed) :], closing=full[at + len(_MARK) :])

    def _special_texts(self) -> list[str]:
        texts = set(getattr(self.hf, "all_special_tokens", []) or [])
        for tok in (getattr(self.hf, "added_tokens_decoder", None) or {}).values():
            if getattr(tok, "special", False):
                texts.add(str(tok.content))
        return [t for t in texts if t]

    def _probe_per_message(self) -> bool:
        """Whether a conversation's ids are the concatenation of its messages' ids (cacheable per message).

        True when rendering is per message (the pieces concatenate to the full text) and every appended
        piece starts with a special token, so tokenising the pieces apart cannot merge across them.
        """
        probe = [*_DUMMY[:2], {"role": "assistant", "content": "a reply"}, {"role": "user", "content": "more"}]
        pieces = [self._message_text(probe[0], first=True)] + [self._message_text(m, first=False) for m in probe[1:]]
        specials = self._special_texts()
        separable = all(any(p.startswith(t) for t in specials) for p in pieces[1:])
        closing_ok = self._pieces.closing == "" or any(self._pieces.closing.startswith(t) for t in specials)
        return separable and closing_ok and "".join(pieces) == self.render(probe)

    def _message_text(self, message: Message, *, first: bool) -> str:
        key = (first, str(message["role"]), str(message["content"]))
        hit = self._texts.get(key)
        if hit is None:
            hit = self.render([message]) if first else self.append_text([message])
            _put(self._texts, key, hit, self._cache_size)
        return hit

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """Ids of a starting conversation, without the generation prompt (equal to :meth:`template_ids`)."""
        if not self.per_message or not messages:
            return self.template_ids(messages)
        out = self.encode(self._message_text(messages[0], first=True))
        for m in messages[1:]:
            out += self.encode(self._message_text(m, first=False))
        return out

    def assistant_content(self, generated: Sequence[int]) -> str:
        """The message text of a generated turn: decoded, its end-of-turn token left out."""
        ids = list(generated)
        if ids and ids[-1] in self.eos_token_ids:
            ids = ids[:-1]
        return self.decode(ids, skip_special_tokens=False)

    def closing_after(self, generated: Sequence[int]) -> str:
        """Template text still missing after a generated turn (its end-of-turn token may already be there)."""
        closing = self._pieces.closing
        if generated and generated[-1] in self.eos_token_ids:
            eos_text = self.decode([generated[-1]], skip_special_tokens=False)
            if closing.startswith(eos_text):
                return closing[len(eos_text) :]
        return closing

    def append_text(self, messages: Sequence[Message]) -> str:
        """Template text of `messages` appended to a closed conversation.

        Located after the dummy assistant reply's text and closing, so a template that re-renders that
        earlier reply once more messages follow (dropping an empty reasoning block, as Qwen3's does) is fine.
        """
        base = self._dummy_text
        full = self.render([*_DUMMY, *messages])
        if full.startswith(base):
            return full[len(base) :]
        at = full.find(_MARK)
        head = full[: at + len(_MARK)] + self._pieces.closing if at >= 0 else None
        if head is not None and full.startswith(head) and _only_reasoning_differs(base, head):
            return full[len(head) :]
        raise ChatTemplateError("the chat template re-renders earlier messages when one is appended")

    def append_ids(self, messages: Sequence[Message], *, pending_closing: str = "") -> list[int]:
        """Ids that extend a conversation by `messages`, after the closing text a generated turn still needs."""
        if not self.per_message:
            return self.encode(pending_closing + self.append_text(messages))
        out = self.encode(pending_closing)
        for m in messages:
            out += self.encode(self._message_text(m, first=False))
        return out


def _only_reasoning_differs(a: str, b: str) -> bool:
    """Whether two renderings differ only by empty ``<think></think>`` blocks."""
    strip = _re.compile(r"<think>\s*</think>\s*", _re.IGNORECASE)
    return strip.sub("", a) == strip.sub("", b)


def _put(cache: OrderedDict, key: Any, value: Any, size: int) -> None:
    cache[key] = value
    if len(cache) > size:
        cache.popitem(last=False)
