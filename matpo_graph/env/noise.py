"""Noisy-tool conditions for the embedded web: HTTP errors, slow answers, empty or polluted results, cut pages.

Each decision is drawn from `random.Random(f"{seed}|{route}|{request key}|{n}")`, where n counts how
often that exact request was seen before. A run that sends the same requests in the same order sees the
same noise, and a retried request gets a fresh draw (so retries can succeed).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass, fields, replace

__all__ = ["NOISE_PRESETS", "NoiseConfig", "NoiseDecision", "NoiseSource"]


@dataclass(frozen=True)
class NoiseConfig:
    """Rates are probabilities per request (0 disables each kind)."""

    error: float = 0.0
    """HTTP 500/503 instead of an answer."""
    rate_limit: float = 0.0
    """HTTP 429 with Retry-After: `retry_after_s`."""
    retry_after_s: float = 1.0
    slow: float = 0.0
    """Delay the answer by `slow_s` seconds."""
    slow_s: float = 2.0
    empty: float = 0.0
    """Search answers with no results (the 'missing response' case)."""
    irrelevant: float = 0.0
    """Per result slot: replace the hit by an unrelated page."""
    truncate: float = 0.0
    """Pages cut short at a random point past `truncate_min`."""
    truncate_min: float = 0.2

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0 or (f.name not in ("retry_after_s", "slow_s") and value > 1):
                raise ValueError(f"noise {f.name} must be in [0, 1] (seconds >= 0 for *_s), got {value}")

    @property
    def active(self) -> bool:
        return any(getattr(self, k) > 0 for k in ("error", "rate_limit", "slow", "empty", "irrelevant", "truncate"))

    @classmethod
    def parse(cls, text: str | None) -> "NoiseConfig":
        """'none', a preset name ('paper', 'light', 'heavy'), or 'key=value,...' (optionally after a preset:
        'paper,slow=0'). Keys are the field names."""
        config = cls()
        if not text or text.strip().lower() in ("none", "off", "0"):
            return config
        known = {f.name for f in fields(cls)}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            if "=" not in part:
                if part.lower() not in NOISE_PRESETS:
                    raise ValueError(f"unknown noise preset {part!r}; presets: {', '.join(NOISE_PRESETS)}")
                config = NOISE_PRESETS[part.lower()]
                continue
            key, _, value = part.partition("=")
            key = key.strip().replace("-", "_")
            if key not in known:
                raise ValueError(f"unknown noise setting {key!r}; known: {', '.join(sorted(known))}")
            try:
                config = replace(config, **{key: float(value)})
            except ValueError as exc:
                raise ValueError(f"bad noise value {part!r}: {exc}") from None
        return config


NOISE_PRESETS: dict[str, NoiseConfig] = {
    "none": NoiseConfig(),
    "light": NoiseConfig(error=0.05, empty=0.05, irrelevant=0.15, truncate=0.1),
    # Unstable search API as described for training runs: failures, missing and noisy results, cut pages.
    "paper": NoiseConfig(error=0.1, rate_limit=0.02, slow=0.05, slow_s=1.0, empty=0.1, irrelevant=0.3, truncate=0.2),
    "heavy": NoiseConfig(error=0.25, rate_limit=0.05, slow=0.1, slow_s=2.0, empty=0.2, irrelevant=0.5, truncate=0.4),
}
NOISE_PRESETS["noisy"] = NOISE_PRESETS["paper"]  # the name used for the noisy-tool condition elsewhere


@dataclass(frozen=True)
class NoiseDecision:
    status: int = 200
    delay_s: float = 0.0
    retry_after_s: float | None = None
    empty: bool = False
    truncate_at: float | None = None
    """Fraction of the page to keep."""
    rng_seed: str = ""
    """Seed for per-slot choices (irrelevant results)."""


class NoiseSource:
    """Draws the noise of each request."""

    def __init__(self, config: NoiseConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self._seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def decide(self, route: str, key: str) -> NoiseDecision:
        c = self.config
        if not c.active:
            return NoiseDecision()
        with self._lock:
            n = self._seen[(route, key)]
            self._seen[(route, key)] += 1
        rng_seed = f"{self.seed}|{route}|{key}|{n}"
        rng = random.Random(rng_seed)
        draws = [rng.random() for _ in range(6)]  # fixed number of draws: settings do not shift each other
        delay = c.slow_s if draws[0] < c.slow else 0.0
        if draws[1] < c.rate_limit:
            return NoiseDecision(status=429, delay_s=delay, retry_after_s=c.retry_after_s, rng_seed=rng_seed)
        if draws[2] < c.error:
            return NoiseDecision(status=500 if draws[5] < 0.5 else 503, delay_s=delay, rng_seed=rng_seed)
        truncate_at = c.truncate_min + (1 - c.truncate_min) * draws[5] if draws[4] < c.truncate else None
        return NoiseDecision(delay_s=delay, empty=draws[3] < c.empty, truncate_at=truncate_at, rng_seed=rng_seed)

    def irrelevant_slots(self, decision: NoiseDecision, n_slots: int, n_pages: int) -> dict[int, int]:
        """Result positions to replace -> index of the unrelated page to show there."""
        if self.config.irrelevant <= 0 or n_pages == 0:
            return {}
        rng = random.Random(decision.rng_seed + "|slots")
        out = {}
        for slot in range(n_slots):
            hit, page = rng.random(), rng.randrange(n_pages)
            if hit < self.config.irrelevant:
                out[slot] = page
        return out
