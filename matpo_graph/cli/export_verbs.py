"""`matpo-graph export`: a run's trained policy as a Hugging Face model folder (LoRA merged)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "export",
        help="write a run's trained model as a Hugging Face folder (transformers, vLLM)",
        description=(
            "Write RUN_DIR's latest checkpoint (or --step N) as a Hugging Face model folder: config, safetensors "
            "weights (LoRA merged into the base weights), generation config, tokenizer and chat template. "
            "transformers' from_pretrained and vLLM load it; `matpo-graph eval DIR --graph G` evaluates it."
        ),
    )
    p.add_argument("run_dir", type=Path, help="a training run folder")
    p.add_argument("-o", "--out", "--output", dest="out", type=Path, required=True, help="model folder to write")
    p.add_argument("--step", type=int, help="export this step's checkpoint (default: the latest)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                   help="weight dtype of the folder (default float32, as trained)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--policy", help="for a graph with several policies (lora, separate): the one to export; a lora "
                   "policy is written as the base model with its adapter merged")
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from matpo_graph.rl.export import ExportError, export_model

    try:
        out = export_model(args.run_dir, args.out, step=args.step, dtype=args.dtype, overwrite=args.overwrite,
                           policy=args.policy)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out} (load it with transformers' from_pretrained or vLLM)")
    return 0
