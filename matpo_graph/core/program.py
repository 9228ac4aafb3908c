"""Compiler output: the rollout Program and the CreditPlan, plain serialisable data.

A Program is self-contained: template sources (with hashes), tool specs and limits are copied in,
so `matpo-graph train DIR` needs only the compiled folder.

Template variables the runtime provides are listed, with their meaning, in `RUNTIME_VARIABLE_DOCS`;
the validator allows exactly these names (`RUNTIME_VARIABLES`) and docs/dsl-reference.md lists them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from matpo_graph.core.registry import ADVANTAGE_NORMALIZATIONS, LOSS_AGGREGATIONS, POLICY_KINDS

__all__ = [
    "RUNTIME_VARIABLES",
    "RUNTIME_VARIABLE_DOCS",
    "CallableView",
    "CreditPlan",
    "PolicyProgram",
    "Program",
    "RoleProgram",
    "TemplateSource",
]

RUNTIME_VARIABLE_DOCS: dict[str, str] = {
    "role": "the role's name",
    "depth": "nesting depth of this trajectory (root = 0)",
    "max_turns": "the role's turn limit",
    "tools": "list of {name, description, parameters, kind} this role may call (kind: tool or child)",
    "tool_names": "the same names as a list of strings",
    "tool_format": '"xml" or "hermes"',
    "tool_instructions": "built-in text listing the callables and showing how to write a call in tool_format",
    "answer_format": '"boxed" or "tag"',
    "answer_instructions": "built-in text explaining how to write the final answer (helpers: their report)",
    "question": "the root query, for every role (the paper's recap of the user query)",
    "root_query": "alias of question",
    "subtask": 'children only: the subtask argument of the delegation call ("" at the root)',
    "args": "children only: all call arguments as a dict ({} at the root)",
    "parent_role": "children only: the caller's role name (None at the root)",
}

RUNTIME_VARIABLES: frozenset[str] = frozenset(RUNTIME_VARIABLE_DOCS)


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TemplateSource(_Data):
    source: str = Field(description="Jinja source text.")
    origin: str = Field(description="'inline', 'builtin:<name>' or the file path relative to the graph file.")
    sha256: str = Field(description="Hex digest of `source`, recorded with every run.")


class CallableView(_Data):
    """Something a role may call, as the model sees it (OpenAI function format) plus how it runs."""

    name: str
    description: str
    parameters: dict[str, Any]
    kind: Literal["tool", "child"]
    target: str = Field(description="Tool name in Program.tools, or the child role name.")
    max_parallel: int = 1
    max_result_chars: int = 4000


class PolicyProgram(_Data):
    """A policy with its defaults filled in: which weights play the roles bound to it.

    ``shared`` is the base model every role without a policy of its own uses; ``lora`` is one adapter on that
    base model; ``separate`` is a model of its own, whose tokenizer must equal the base model's (trajectories
    are token ids, compared across roles): the core records that requirement, the runtime checks it when it
    loads the models.
    """

    name: str
    kind: Literal[POLICY_KINDS.names]  # type: ignore[valid-type]
    rank: int | None = Field(default=None, description="lora: adapter rank.")
    alpha: float | None = Field(default=None, description="lora: scaling numerator (alpha / rank).")
    dropout: float | None = Field(default=None, description="lora: dropout on the adapter's input.")
    target_modules: list[str] | Literal["all-linear"] | None = Field(default=None, description="lora: wrapped modules.")
    lr: float | None = Field(default=None, description="lora and separate: learning rate (None: the run's lr).")
    model: str | None = Field(default=None, description="separate: a model folder, the embedded name or a Hub id.")
    requires_base_tokenizer: bool = Field(default=False, description="separate: its tokenizer must equal the base model's.")


class RoleProgram(_Data):
    name: str
    description: str = ""
    system: TemplateSource
    user: TemplateSource
    summary: TemplateSource
    examples: list[list[dict[str, str]]] = Field(default_factory=list, description="Resolved few-shot messages [{role, content}].")
    callables: list[CallableView] = Field(default_factory=list)
    max_turns: int
    max_tokens_per_turn: int
    final_summary: Literal["never", "always", "on_overflow"]
    trainable: bool = True
    temperature: float | None = None
    policy: str = Field(default="shared", description="Name of the policy (in Program.policies) that plays this role.")

    def callable(self, name: str) -> CallableView | None:
        for c in self.callables:
            if c.name == name:
                return c
        return None


class Program(_Data):
    """Everything the executor needs to run the graph."""

    format_version: int = 1
    graph_name: str
    graph_sha256: str
    root: str
    tool_call_format: Literal["xml", "hermes", "native"]
    answer_format: Literal["boxed", "tag"]
    roles: dict[str, RoleProgram]
    tools: dict[str, dict[str, Any]] = Field(description="ToolSpec dumps by name (backend, config, timeouts).")
    max_depth: int
    context_tokens: int
    summary_reserve: int
    tree_seconds: float | None = Field(default=None, description="Wall-clock budget of one tree (None: none); see Limits.")
    tree_tokens: int | None = Field(default=None, description="Generated-token budget of one tree (None: none); see Limits.")
    max_concurrency: int
    policies: dict[str, PolicyProgram] = Field(
        default_factory=lambda: {"shared": PolicyProgram(name="shared", kind="shared")},
        description="Policies by name; programs written before policies existed play every role with one shared policy.",
    )

    def uses_embedded_web(self) -> bool:
        """Whether a tool talks to the embedded web (``config.endpoint: embedded``), which the runner must serve."""
        return tools_use_embedded_web(self.tools)

    def role_policies(self) -> dict[str, str]:
        """role -> policy name."""
        return {name: role.policy for name, role in self.roles.items()}

    def template_hashes(self) -> dict[str, str]:
        """{'<role>.<part>': sha256} for every template, recorded with each run and checkpoint."""
        out: dict[str, str] = {}
        for name, role in sorted(self.roles.items()):
            for part in ("system", "user", "summary"):
                out[f"{name}.{part}"] = getattr(role, part).sha256
        return out


class CreditPlan(_Data):
    """How the root's reward becomes per-token advantages, and how the loss is aggregated."""

    format_version: int = 1
    root: str
    group_by: Literal["question"] = "question"
    group_size: int
    strategy: str
    normalization: Literal[ADVANTAGE_NORMALIZATIONS.names]  # type: ignore[valid-type]
    epsilon: float
    single_member: Literal["zero", "passthrough"]
    loss_agg: Literal[LOSS_AGGREGATIONS.names]  # type: ignore[valid-type]
    clip_ratio_low: float
    clip_ratio_high: float
    dual_clip: float | None
    kl_coef: float
    kl_estimator: Literal["k1", "k3"]
    answer_format: Literal["boxed", "tag"]
    accuracy_scorer: str
    accuracy_weight: float
    format_weight: float
    no_call_score: float
    judge: dict[str, Any] | None = None
    numeric_tolerance: float = Field(default=1e-6, ge=0.0, description="Relative tolerance of the numeric accuracy scorer.")
    calling_roles: list[str] | None = Field(
        default=None,
        description="Roles that have something to call (tools or edges); format scoring skips the others. None: every role.",
    )
    trained_roles: list[str] = Field(description="Roles whose trajectories enter the loss.")
    role_policies: dict[str, str] = Field(
        default_factory=dict,
        description="role -> the policy that plays it (and is trained on its tokens); a role not listed is on the "
        "shared policy. The advantage does not depend on it: one plan credits every trajectory.",
    )


def tools_use_embedded_web(tools: dict[str, dict[str, Any]]) -> bool:
    """Whether any of these tool dumps points at the embedded web (``config.endpoint: embedded``)."""
    return any(str((spec.get("config") or {}).get("endpoint", "")) == "embedded" for spec in tools.values())
