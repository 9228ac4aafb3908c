"""A tiny randomly initialised chat model for GPU smoke runs of the veRL target (nothing is downloaded).

The architecture is a small Llama with the embedded SmolLM2 tokenizer and chat template, so veRL's
FSDP actor and vLLM rollout load it like any HuggingFace model, in seconds. Its outputs are noise:
it checks that a run goes through end to end, not that anything is learned.

    python -m matpo_graph.verl_target.smoke OUT_DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["build_tiny_model"]


def build_tiny_model(out_dir: str | Path, *, tokenizer_dir: str | Path | None = None, seed: int = 0,
                     hidden_size: int = 128, layers: int = 2, max_positions: int = 8192) -> Path:
    """Write config, random weights (safetensors) and the tokenizer into `out_dir`; returns the folder.

    Args:
        out_dir: target folder (created).
        tokenizer_dir: where the tokenizer comes from; the embedded SmolLM2 folder by default.
        seed: torch seed of the initialisation.
        hidden_size, layers, max_positions: size of the model.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from matpo_graph.runtime.models import resolve_model

    source = Path(tokenizer_dir) if tokenizer_dir is not None else resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a tiny random chat model for veRL smoke runs.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(build_tiny_model(args.out_dir, seed=args.seed))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
