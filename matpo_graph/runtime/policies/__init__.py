"""Policy backends behind the one :class:`~matpo_graph.runtime.policy.Policy` protocol, built by name.

Backends load lazily: importing this package imports no torch, vllm or httpx.

=====================  ========================================================================
spec                   backend
=====================  ========================================================================
``vllm``               in-process vLLM async engine (:mod:`.vllm`)
``hf``                 transformers generation (:mod:`.hf`)
``openai:URL``         an OpenAI-compatible completions server (:mod:`.openai`)
``scripted:FILE``      replies from a JSON script, for tests (:mod:`.scripted`)
=====================  ========================================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["POLICY_KINDS", "make_policy"]

POLICY_KINDS: tuple[str, ...] = ("vllm", "hf", "openai:URL", "scripted:FILE")


def make_policy(spec: str, model_dir: str | Path | None = None, **kwargs: Any) -> Any:
    """Build a policy from a spec string.

    Args:
        spec: ``'vllm'``, ``'hf'``, ``'openai:http://host:port/v1'`` or ``'scripted:path/to/script.json'``.
        model_dir: local model folder (vllm, hf; scripted and openai use its tokenizer when no
            ``tokenizer=`` is given).
        kwargs: passed to the backend's constructor.

    Raises:
        ValueError: unknown spec or missing argument.
    """
    kind, _, arg = spec.partition(":")
    if kind == "vllm" and not arg:
        from matpo_graph.runtime.policies.vllm import VLLMPolicy

        if model_dir is None:
            raise ValueError("the vllm policy needs a model folder")
        return VLLMPolicy(model_dir, **kwargs)
    if kind == "hf" and not arg:
        from matpo_graph.runtime.policies.hf import HFPolicy

        return HFPolicy(model_dir, **kwargs)
    if kind == "openai" and arg:
        from matpo_graph.runtime.policies.openai import OpenAIPolicy

        if "tokenizer" not in kwargs and model_dir is not None:
            kwargs["tokenizer"] = _chat(model_dir)
        return OpenAIPolicy(arg, **kwargs)
    if kind == "scripted" and arg:
        from matpo_graph.runtime.policies.scripted import ScriptedPolicy

        tokenizer = kwargs.pop("tokenizer", None)
        if tokenizer is None:
            if model_dir is None:
                raise ValueError("the scripted policy needs a tokenizer or a model folder")
            tokenizer = _chat(model_dir)
        return ScriptedPolicy.from_file(arg, tokenizer, **kwargs)
    raise ValueError(f"unknown policy {spec!r}: use one of {', '.join(POLICY_KINDS)}")


def _chat(model_dir: str | Path) -> Any:
    from matpo_graph.runtime.chat import ChatTokenizer

    return ChatTokenizer.from_pretrained(model_dir)
