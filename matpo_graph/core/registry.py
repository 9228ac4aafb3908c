"""Name tables of the pluggable pieces: credit strategies, advantage normalisations, loss aggregations,
scorers and policy kinds.

One table per piece, read by everything that names one: the graph spec (and so its JSON Schema and the
generated DSL reference), validation, both compilers (local and veRL), the trainers that implement them,
and the docs. Implementations bind to a table with :meth:`NameTable.implemented_by`, which fails at import
when the two disagree, so a name can be neither documented without code nor coded without being accepted
by the spec. Custom code (``package.module:function``) stays possible where a table says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar

__all__ = [
    "ADVANTAGE_NORMALIZATIONS",
    "CREDIT_STRATEGIES",
    "LOCAL_SCORER_NAMES",
    "LOSS_AGGREGATIONS",
    "POLICY_KINDS",
    "SCORERS",
    "NameTable",
]

T = TypeVar("T")


class NameTable(Mapping[str, str]):
    """An ordered, read-only table name -> one-line description of one kind of pluggable piece."""

    def __init__(self, kind: str, entries: Mapping[str, str], *, custom_code: bool = False) -> None:
        self.kind = kind
        self.custom_code = custom_code
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> str:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def names(self) -> tuple[str, ...]:
        """The names in table order (usable as ``Literal[table.names]``)."""
        return tuple(self._entries)

    def choices(self) -> str:
        """'a, b or c' (plus the custom-code form where the table allows it), for messages and docs."""
        names = list(self._entries)
        if self.custom_code:
            names.append("a custom 'package.module:function'")
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]

    def described(self) -> str:
        """'a: what a does; b: what b does', for field descriptions."""
        return "; ".join(f"{name}: {text}" for name, text in self._entries.items())

    def implemented_by(self, implementations: Mapping[str, T], *, subset: tuple[str, ...] | None = None) -> dict[str, T]:
        """`implementations` in table order, after checking they cover exactly the table's names (or `subset`).

        Raises:
            RuntimeError: a name without an implementation, or an implementation without a name.
        """
        expected = set(self._entries if subset is None else subset)
        got = set(implementations)
        if got != expected:
            raise RuntimeError(f"{self.kind} implementations {sorted(got)} do not match the table {sorted(expected)}")
        return {name: implementations[name] for name in self._entries if name in got}


CREDIT_STRATEGIES = NameTable("credit strategy", {
    "broadcast": "MATPO: every trajectory of a tree gets its root's group-normalised reward",
    "root_only": "GRPO over root rewards, only root trajectories trained",
    "role_normalized": "Dr. MAS: root rewards normalised separately over each role's trajectories of a group",
}, custom_code=True)

ADVANTAGE_NORMALIZATIONS = NameTable("advantage normalisation", {
    "std": "subtract the group mean and divide by the group's unbiased std (GRPO)",
    "mean_only": "only subtract the group mean (Dr. GRPO)",
})

LOSS_AGGREGATIONS = NameTable("loss aggregation", {
    "tree_token_mean": "per tree, the sum over its tokens over its generated tokens, then the mean over trees (MATPO)",
    "token_mean": "one mean over every trained token of the batch",
    "seq_mean_token_mean": "the mean over trajectories of their token means",
})

SCORERS = NameTable("scorer", {
    "exact_match": "the normalised answer equals a gold alias",
    "f1": "best token-level F1 against the gold aliases",
    "contains": "a normalised gold alias appears in the answer as whole words",
    "numeric": "the answer's number is within a relative tolerance of a numeric alias",
    "judge": "an OpenAI-compatible LLM judge, with a local scorer as fallback",
}, custom_code=True)

LOCAL_SCORER_NAMES: tuple[str, ...] = tuple(name for name in SCORERS if name != "judge")
"""Scorers computed here without a network call (a judge's fallback must be one)."""

POLICY_KINDS = NameTable("policy kind", {
    "shared": "the one set of weights every role without `policy:` uses (the default)",
    "lora": "one adapter on the shared base model, trained only on its roles' tokens",
    "separate": "a model of its own",
})
