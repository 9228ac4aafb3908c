"""Which arithmetic the trainers' matmuls use on this machine.

bf16 only pays where the CPU computes it natively (AVX512-BF16 or AMX); elsewhere it is emulated and slower
than float32, so ``auto`` looks at the CPU flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["Precision", "cpu_has_native_bf16", "resolve_precision"]

Precision = Literal["bf16", "fp32"]


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU computes bfloat16 natively; `cpuinfo` is /proc/cpuinfo's text (read when None)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_precision(precision: str, cpuinfo: str | None = None) -> Precision:
    """The precision `precision` stands for here: ``auto`` becomes bf16 or fp32 by the CPU.

    Raises:
        ValueError: anything but auto, bf16 or fp32.
    """
    if precision == "auto":
        return "bf16" if cpu_has_native_bf16(cpuinfo) else "fp32"
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"precision must be auto, bf16 or fp32, got {precision!r}")
    return precision  # type: ignore[return-value]
