"""The graph DSL: pydantic models for what users write in YAML.

These models check *shape* only (types, enums, unknown keys). Cross-references,
reachability, recursion bounds and template variables are checked afterwards by
:mod:`matpo_graph.core.validate`, so that every problem of a file is reported at once.
"""

from __future__ import annotations

import copy
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from matpo_graph.core.registry import (
    ADVANTAGE_NORMALIZATIONS,
    CREDIT_STRATEGIES,
    LOCAL_SCORER_NAMES,
    LOSS_AGGREGATIONS,
    POLICY_KINDS,
    SCORERS,
)
from matpo_graph.core.trust import is_code_ref

__all__ = [
    "AccuracySpec",
    "BUILTIN_SCORERS",
    "CreditSpec",
    "Edge",
    "ExampleMessage",
    "FormatSpec",
    "Graph",
    "JudgeSpec",
    "KLSpec",
    "Limits",
    "PolicySpec",
    "RewardSpec",
    "Role",
    "TemplateRef",
    "ToolSpec",
    "DEFAULT_EDGE_PARAMETERS",
    "DEFAULT_POLICY",
    "LORA_DEFAULTS",
    "NAME_PATTERN",
]

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"
_NAME_RE = re.compile(NAME_PATTERN)
_TEMPLATE_FILE_SUFFIXES = (".j2", ".jinja", ".jinja2", ".txt", ".md")

BUILTIN_SCORERS: tuple[str, ...] = SCORERS.names

DEFAULT_POLICY = "shared"
"""The policy of roles without `policy:` when the graph declares no `shared` policy of its own."""

LORA_DEFAULTS: dict[str, Any] = {"rank": 8, "alpha": None, "dropout": 0.0, "target_modules": "all-linear"}
"""Defaults of a lora policy's fields (alpha None: 2 x rank)."""

DEFAULT_EDGE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "subtask": {
            "type": "string",
            "description": "A self-contained description of the subtask to delegate.",
        }
    },
    "required": ["subtask"],
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TemplateRef(_Strict):
    """A Jinja template given either inline (`text`) or as a file relative to the graph file."""

    text: str | None = Field(default=None, description="Inline Jinja source.")
    file: str | None = Field(default=None, description="Path of a Jinja file, relative to the graph file.")

    @model_validator(mode="after")
    def _exactly_one(self) -> "TemplateRef":
        if (self.text is None) == (self.file is None):
            raise ValueError("give exactly one of 'text' or 'file'")
        return self

    @classmethod
    def coerce(cls, value: Any) -> Any:
        """A bare string is a file path when it is one line ending in a template suffix, else inline text."""
        if isinstance(value, str):
            one_line = "\n" not in value.strip() and "{{" not in value and "{%" not in value
            if one_line and value.strip().endswith(_TEMPLATE_FILE_SUFFIXES):
                return {"file": value.strip()}
            return {"text": value}
        return value


Template = Annotated[
    TemplateRef,
    BeforeValidator(TemplateRef.coerce, json_schema_input_type=str | TemplateRef),
    Field(description="Inline Jinja text, a file path ending in .j2/.jinja/.jinja2/.txt/.md, or {text|file: ...}."),
]


class ExampleMessage(_Strict):
    """One message of a few-shot demonstration. Examples are shown to the model and never trained on."""

    role: Literal["user", "assistant", "tool"] = Field(description="Who speaks.")
    content: str = Field(description="Message text. Assistant tool calls use the graph's tool_call_format.")


class Role(_Strict):
    """An agent role: prompts, the tools it may use and how its trajectory ends.

    The edges leaving a role (see `Graph.edges`) are the agent-tools it may call.
    """

    description: str = Field(default="", description="What this role does; shown in drawings.")
    system: Template = Field(description="System prompt template.")
    user: Template | None = Field(
        default=None,
        description="First user message template. Default: the question for the root, the subtask plus a recap of the root query for children.",
    )
    tools: list[str] = Field(default_factory=list, description="Names of tools (from `tools:`) this role may call.")
    max_turns: int = Field(default=8, ge=1, le=256, description="Model turns before the trajectory is closed.")
    max_tokens_per_turn: int = Field(default=512, ge=1, le=131072, description="Generation cap for one model turn.")
    final_summary: Literal["never", "always", "on_overflow"] = Field(
        default="never",
        description="When to ask for a closing summary turn: never, always (workers: what the parent sees), or only when turns or context run out.",
    )
    summary_prompt: Template | None = Field(default=None, description="Template of the summary instruction; a built-in one when omitted.")
    examples: list[list[ExampleMessage]] | str = Field(
        default_factory=list,
        description="Few-shot demonstrations placed before the task (never trained on): a list of message lists, or a YAML/JSON file with one.",
    )
    trainable: bool = Field(default=True, description="Whether this role's trajectories enter the loss.")
    temperature: float | None = Field(default=None, ge=0.0, le=5.0, description="Sampling temperature override for this role.")
    policy: str | None = Field(
        default=None,
        description="Name of the policy (under `policies:`) that plays this role; default: the shared policy.",
    )


class ToolSpec(_Strict):
    """A tool in OpenAI function format plus the backend that runs it."""

    description: str = Field(description="What the tool does, as the model sees it.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        json_schema_extra={"default": {"type": "object", "properties": {}}},
        description="JSON Schema (draft 2020-12) of the arguments object.",
    )
    backend: Literal["search", "scrape", "python"] = Field(description="Which implementation runs the tool.")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Backend settings: search {endpoint, api_key_env, num_results, blocklist}; scrape {allow_hosts, format, blocklist}; python {function: 'module:function'}.",
    )
    timeout_s: float = Field(default=20.0, gt=0, le=600, description="Per-attempt timeout in seconds.")
    retries: int = Field(default=2, ge=0, le=10, description="Retries on timeouts, 429 and 5xx, with backoff.")
    max_output_chars: int = Field(default=4000, ge=64, le=1_000_000, description="Tool output is truncated to this size.")

    @model_validator(mode="after")
    def _python_needs_function(self) -> "ToolSpec":
        if self.backend == "python":
            fn = self.config.get("function")
            if not is_code_ref(fn):
                raise ValueError("a python tool needs config.function of the form 'package.module:function'")
        return self


class Edge(_Strict):
    """A delegation edge: `from` may call `to` as a tool named `as`; each call runs a nested rollout."""

    from_: str = Field(alias="from", description="Parent role.")
    to: str = Field(description="Child role.")
    as_: str = Field(alias="as", description="The tool name the parent sees.")
    description: str = Field(default="Delegate a subtask to a helper agent and get back its summary.", description="Tool description shown to the parent.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: copy.deepcopy(DEFAULT_EDGE_PARAMETERS),
        json_schema_extra={"default": DEFAULT_EDGE_PARAMETERS},
        description="JSON Schema of the call arguments; by default one string `subtask`.",
    )
    max_parallel: int = Field(default=4, ge=1, le=256, description="Concurrent child rollouts per parent turn on this edge.")
    max_result_chars: int = Field(default=2000, ge=64, le=100_000, description="Cap on the child summary returned to the parent.")

    @field_validator("as_")
    @classmethod
    def _tool_name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"tool name {v!r} must match {NAME_PATTERN}")
        return v


class JudgeSpec(_Strict):
    """An LLM judge behind any OpenAI-compatible endpoint."""

    endpoint: str = Field(description="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1.")
    model: str = Field(description="Model name sent to the server.")
    api_key_env: str | None = Field(default=None, description="Environment variable holding the API key (never logged).")
    retries: int = Field(default=2, ge=0, le=10, description="Retries before falling back to the local scorer.")
    timeout_s: float = Field(default=30.0, gt=0, description="Timeout of one judge request in seconds.")
    fallback: Literal[LOCAL_SCORER_NAMES] = Field(default="contains", description="Local scorer used when the judge fails.")  # type: ignore[valid-type]


class AccuracySpec(_Strict):
    """Accuracy of the root's final answer against the gold aliases."""

    scorer: str = Field(
        default="exact_match",
        description=f"How the final answer is compared with the gold aliases: {SCORERS.described()}; or a custom "
        "'module:function' with veRL's compute_score(data_source, solution_str, ground_truth, extra_info) signature "
        "returning a number in [0, 1] (or a dict with 'score'); custom code runs only when the user trusts it.",
    )
    weight: float = Field(default=0.9, ge=0.0, le=1.0, description="Weight of accuracy in the reward (paper: 0.9).")
    judge: JudgeSpec | None = Field(default=None, description="Required when scorer is 'judge'.")
    numeric_tolerance: float = Field(default=1e-6, ge=0.0, description="Relative tolerance of the numeric scorer.")

    @field_validator("scorer")
    @classmethod
    def _known_scorer(cls, v: str) -> str:
        if v in BUILTIN_SCORERS or is_code_ref(v):
            return v
        raise ValueError(f"unknown scorer {v!r}: use {SCORERS.choices()}")

    @model_validator(mode="after")
    def _judge_needs_config(self) -> "AccuracySpec":
        if self.scorer == "judge" and self.judge is None:
            raise ValueError("scorer 'judge' needs a 'judge' block (endpoint, model)")
        return self


class FormatSpec(_Strict):
    """Share of well-formed tool calls: fmt = 0.5 * root + 0.5 * mean over descendants."""

    weight: float = Field(default=0.1, ge=0.0, le=1.0, description="Weight of the format score in the reward (paper: 0.1).")
    no_call_score: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Format score of a trajectory that could call tools but made no call (0 by default, so that never calling is not rewarded).",
    )


class RewardSpec(_Strict):
    """reward = accuracy.weight * acc + format.weight * fmt (paper: 0.9 and 0.1)."""

    answer_format: Literal["boxed", "tag"] = Field(default="boxed", description="Final answers as \\boxed{...} or <answer>...</answer>.")
    accuracy: AccuracySpec = Field(default_factory=AccuracySpec, description="Scoring of the root's final answer.")
    format: FormatSpec = Field(default_factory=FormatSpec, description="Scoring of well-formed tool calls over the tree.")


class KLSpec(_Strict):
    """Optional KL penalty to the reference policy."""

    coef: float = Field(default=0.0, ge=0.0, description="Weight of the KL penalty to the reference policy; 0 disables it.")
    estimator: Literal["k1", "k3"] = Field(default="k3", description="KL estimator: k1 (log-ratio) or k3 (low-variance, non-negative).")


class CreditSpec(_Strict):
    """How the root reward becomes advantages, and how the loss is aggregated."""

    strategy: str = Field(
        default="broadcast",
        description=f"{CREDIT_STRATEGIES.described()}; or a custom 'module:function'.",
    )
    normalization: Literal[ADVANTAGE_NORMALIZATIONS.names] = Field(default="std", description=ADVANTAGE_NORMALIZATIONS.described())  # type: ignore[valid-type]
    group_size: int = Field(default=4, ge=1, le=1024, description="Root rollouts per question (G).")
    epsilon: float = Field(default=1e-6, gt=0.0, description="Added to the group std before dividing.")
    single_member: Literal["zero", "passthrough"] = Field(
        default="zero",
        description="A group of one gets advantage 0 (zero) or its raw score (passthrough, as verl does).",
    )
    loss_agg: Literal[LOSS_AGGREGATIONS.names] = Field(  # type: ignore[valid-type]
        default="tree_token_mean",
        description=LOSS_AGGREGATIONS.described(),
    )
    clip_ratio_low: float = Field(default=0.2, gt=0.0, lt=1.0, description="PPO clip range below 1 (ratio >= 1 - low).")
    clip_ratio_high: float = Field(default=0.2, gt=0.0, description="PPO clip range above 1 (ratio <= 1 + high).")
    dual_clip: float | None = Field(default=None, gt=1.0, description="Dual-clip constant c (>1) for negative advantages; off when null.")
    kl: KLSpec = Field(default_factory=KLSpec, description="KL penalty to the reference policy (off by default).")

    @field_validator("strategy")
    @classmethod
    def _known_or_import_path(cls, v: str) -> str:
        if v in CREDIT_STRATEGIES or is_code_ref(v):
            return v
        raise ValueError(f"unknown credit strategy {v!r}: use {CREDIT_STRATEGIES.choices()}")


class Limits(_Strict):
    """Limits of one rollout tree. Setting max_depth explicitly is what allows cycles among roles."""

    max_depth: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Deepest nesting level allowed (root is depth 0); deeper calls are refused at run time. Set it explicitly to allow cycles among roles.",
    )
    context_tokens: int = Field(default=8192, ge=256, le=1_048_576, description="Token budget of one trajectory's context.")
    summary_reserve: int = Field(default=512, ge=0, description="Tokens kept free for the closing summary or answer.")
    tree_seconds: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="Wall-clock budget of one rollout tree in seconds (null: none). A tree past it is cut: its open model "
        "and tool calls and its children stop, it is marked truncated and scored with what its root wrote (no answer: "
        "the reward of a missing answer). Off by default: wall time depends on the machine and its load, so a default "
        "would make one seed give different trees on different machines.",
    )
    tree_tokens: int | None = Field(
        default=None,
        ge=1,
        le=16_777_216,
        description="Budget of generated tokens of one rollout tree, summed over all its trajectories (null: none). A turn "
        "asks for at most what is left; once the tree has generated this many tokens it is cut like a tree past "
        "tree_seconds. Off by default, so existing graphs roll out as before: max_turns, max_tokens_per_turn and "
        "max_depth already bound every tree, and this only caps the rare tree that fans out and loops.",
    )
    max_concurrency: int = Field(default=64, ge=1, le=4096, description="Global cap on concurrent tool and child calls of one rollout tree.")


class PolicySpec(_Strict):
    """Which weights play a role: the shared model, a LoRA adapter on it, or a separate model.

    Fields that do not belong to the policy's kind are reported by validation, at their own line.
    """

    kind: Literal[POLICY_KINDS.names] = Field(description=POLICY_KINDS.described() + ".")  # type: ignore[valid-type]
    description: str = Field(default="", description="What this policy is for; shown in drawings.")
    rank: int | None = Field(default=None, ge=1, le=1024, description="lora: adapter rank (default 8).")
    alpha: float | None = Field(default=None, gt=0.0, description="lora: scaling numerator, the update is scaled by alpha / rank (default 2 x rank).")
    dropout: float | None = Field(default=None, ge=0.0, lt=1.0, description="lora: dropout on the adapter's input (default 0).")
    target_modules: list[str] | Literal["all-linear"] | None = Field(
        default=None,
        description="lora: module names the adapter wraps, e.g. [q_proj, v_proj], or all-linear (the default).",
    )
    lr: float | None = Field(
        default=None, gt=0.0, le=1.0,
        description="lora and separate: this policy's learning rate (default: the run's lr). An adapter trains few "
        "parameters and usually wants a larger one than the shared model.",
    )
    model: str | None = Field(
        default=None,
        description="separate (required): a local model folder, the embedded model's name or a Hub id. Its tokenizer must "
        "equal the base model's (checked when the models are loaded).",
    )


class Graph(_Strict):
    """A multi-agent graph: roles, tools, delegation edges, reward, credit and limits."""

    name: str = Field(description="Graph name.")
    description: str = Field(default="", description="What the graph is for.")
    root: str = Field(description="The role that receives the question and whose answer is scored.")
    tool_call_format: Literal["xml", "hermes", "native"] = Field(
        default="hermes",
        description="xml: <use_tool><name>..</name><arguments>{json}</arguments></use_tool>; hermes: <tool_call>{\"name\":..,\"arguments\":{..}}</tool_call>; "
        "native: the model's chat template renders the tools and results (apply_chat_template(tools=...)) and its calls are read in the "
        "template's dialect (Qwen2.5/Qwen3: hermes tags; Llama 3.x: a JSON object with name and parameters).",
    )
    roles: dict[str, Role] = Field(description="Roles by name.")
    tools: dict[str, ToolSpec] = Field(default_factory=dict, description="Tools by name.")
    edges: list[Edge] = Field(default_factory=list, description="Delegation edges.")
    reward: RewardSpec = Field(default_factory=RewardSpec, description="How the root's final answer is scored.")
    credit: CreditSpec = Field(default_factory=CreditSpec, description="How the reward becomes advantages, and the loss settings.")
    limits: Limits = Field(default_factory=Limits, description="Depth, context and concurrency limits of one rollout tree.")
    policies: dict[str, PolicySpec] = Field(
        default_factory=dict,
        description="Policies by name (shared, lora, separate); roles pick one with `policy:`. Without this section every "
        "role is played by one shared policy.",
    )

    @field_validator("roles", "tools", "policies")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in v if not _NAME_RE.match(k)]
        if bad:
            raise ValueError(f"names must match {NAME_PATTERN}: {', '.join(map(repr, bad))}")
        return v

    def edges_from(self, role: str) -> list[Edge]:
        """Edges the given role may call, in declaration order."""
        return [e for e in self.edges if e.from_ == role]

    def to_yaml_dict(self) -> dict[str, Any]:
        """A plain dict that loads back into an equal Graph (aliases used, keys never given dropped).

        Values the file set explicitly are kept even when equal to the default, because some checks
        depend on them (a cycle is allowed only when `limits.max_depth` is set explicitly).
        """
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def max_depth_is_explicit(self) -> bool:
        """Whether the graph file set `limits.max_depth` itself (required for cyclic graphs)."""
        return "limits" in self.model_fields_set and "max_depth" in self.limits.model_fields_set
