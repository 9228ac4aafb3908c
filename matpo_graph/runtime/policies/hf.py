"""The HuggingFace policy: ``transformers`` generation, batched across concurrent requests.

Slower than vLLM but needs nothing beyond torch and transformers, and shares the trainer's module
(``HFPolicy(model=...)``), so its logprobs are exactly the trainer's. Concurrent ``generate`` calls are
collected for a few milliseconds and run as one left-padded batch per distinct sampling setting, in a
worker thread so the event loop stays free. Logprobs are those of the distribution sampled from
(``log_softmax(logits / temperature)``, before top-p), as the vLLM policy reports them and the trainer
computes them; greedy requests report the raw ``log_softmax``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matpo_graph.runtime.policy import Generation, PolicyError, SamplingParams

__all__ = ["HFPolicy"]


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future


class HFPolicy:
    """Generate with a ``transformers`` causal LM.

    Args:
        model_dir: local model folder (ignored when `model` is given).
        model: an already loaded causal LM (e.g. the trainer's); its weights are used live.
        tokenizer: a HuggingFace tokenizer (loaded from `model_dir` when omitted).
        dtype: torch dtype name for loading.
        device: torch device.
        max_batch: most requests generated together.
        batch_wait_s: how long to wait for more requests before starting a batch.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        dtype: str = "float32",
        device: str = "cpu",
        max_batch: int = 16,
        batch_wait_s: float = 0.005,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if model is None:
            if model_dir is None:
                raise ValueError("HFPolicy needs model_dir or model")
            model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype)).to(device)
        if tokenizer is None:
            if model_dir is None:
                raise ValueError("HFPolicy needs a tokenizer when built from a model object")
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = device
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        eos = tokenizer.eos_token_id
        self.eos_ids: set[int] = {eos} if isinstance(eos, int) else set(eos or [])
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids or {0})
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task | None = None

    async def load_weights(self, state_dict: Any) -> float:
        """Copy new weights into the model; returns seconds taken.

        Raises:
            PolicyError: keys the model does not have, or missing keys other than a tied ``lm_head.weight``.
        """
        import time

        start = time.perf_counter()
        result = await asyncio.to_thread(self.model.load_state_dict, dict(state_dict), strict=False)
        missing = [k for k in result.missing_keys if k != "lm_head.weight"]
        if result.unexpected_keys or missing:
            raise PolicyError(
                f"weights do not match the model: unexpected {result.unexpected_keys[:5]}, missing {missing[:5]}"
            )
        return time.perf_counter() - start

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if self._queue is None:
            self._queue = asyncio.Queue()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._serve())
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Request(list(prompt_ids), sampling, fut))
        return await fut

    async def _serve(self) -> None:
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            await asyncio.sleep(self.batch_wait_s)
            while not self._queue.empty() and len(batch) < self.max_batch:
                batch.append(self._queue.get_nowait())
            groups: dict[tuple, list[_Request]] = {}
            for req in batch:
                s = req.sampling
                groups.setdefault((s.temperature, s.top_p, s.max_tokens, s.stop, s.ignore_eos), []).append(req)
            for reqs in groups.values():
                try:
                    results = await asyncio.to_thread(self._generate_batch, reqs)
                except Exception as exc:  # noqa: BLE001
                    for req in reqs:
                        if not req.future.done():
                            req.future.set_exception(
                                PolicyError(f"transformers generation failed: {type(exc).__name__}: {exc}")
                            )
                    continue
                for req, gen in zip(reqs, results):
                    if not req.future.done():
                        req.future.set_result(gen)

    def _generate_batch(self, reqs: list[_Request]) -> list[Generation]:
        import torch

        s = reqs[0].sampling
        width = max(len(r.prompt_ids) for r in reqs)
        ids = torch.full((len(reqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(reqs), width), dtype=torch.long)
        for i, r in enumerate(reqs):  # left padding
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids) :] = 1
        seed = next((r.sampling.seed for r in reqs if r.sampling.seed is not None), None)
        if seed is not None:
            torch.manual_seed(seed)
        kwargs: dict[str, Any] = {
            "max_new_tokens": s.max_tokens,
            "do_sample": s.temperature > 0,
            "pad_token_id": self.pad_id,
            "return_dict_in_generate": True,
            "output_logits": True,
        }
        if s.temperature > 0:
            kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=0)
        if s.ignore_eos:
            kwargs["min_new_tokens"] = s.max_tokens
        if s.stop:
            kwargs.update(stop_strings=list(s.stop), tokenizer=self.tokenizer)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kwargs)
        new = out.sequences[:, width:].cpu()
        scale = s.temperature if s.temperature > 0 else 1.0
        logps = torch.stack([torch.log_softmax(step.float() / scale, dim=-1) for step in out.logits], dim=1).cpu()
        results = []
        for i in range(len(reqs)):
            toks: list[int] = []
            lps: list[float] = []
            finish = "length"
            for t in range(new.shape[1]):
                tid = int(new[i, t])
                toks.append(tid)
                lps.append(float(logps[i, t, tid]))
                if tid in self.eos_ids and not s.ignore_eos:
                    finish = "stop"
                    break
            if s.stop:
                cut = self._stop_cut(toks, s.stop)
                if cut is not None:
                    toks, lps, finish = toks[:cut], lps[:cut], "stop"
            text = self.tokenizer.decode(toks, skip_special_tokens=True)
            results.append(Generation(token_ids=toks, logprobs=lps, finish_reason=finish, text=text))
        return results

    def _stop_cut(self, toks: list[int], stops: tuple[str, ...]) -> int | None:
        """Length of the shortest prefix whose text contains a stop string (it is kept, as vLLM is asked to)."""
        for k in range(1, len(toks) + 1):
            text = self.tokenizer.decode(toks[:k], skip_special_tokens=False)
            if any(stop in text for stop in stops):
                return k
        return None
