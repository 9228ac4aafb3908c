"""Default budget of the cold start, shared by `train`, `sft`, veRL's launcher and the cold-start benchmark."""

from __future__ import annotations

__all__ = ["WARMUP_DEMOS", "WARMUP_DRILLS", "WARMUP_EPOCHS", "WARMUP_LR"]

# One pass over 40 demonstrations generalised better than two over 20 at about the same cost (scripts/bench_coldstart.py).
WARMUP_DEMOS = 40
# Extra demonstrations of which only each trajectory's first turn is trained: the planner's named
# fields and decomposition, each helper's field to find. Cheap, and what teaches those choices.
WARMUP_DRILLS = 80
WARMUP_EPOCHS = 1
WARMUP_LR = 3e-4
