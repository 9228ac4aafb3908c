"""Compile a validated Graph into the local rollout Program and the CreditPlan, and read them back.

Compilation is deterministic: the same graph and template files give byte-identical output
(sorted keys, declaration order for lists, no timestamps, no absolute paths). Templates are resolved
with their includes inlined, so a compiled folder is self-contained.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from matpo_graph.core.errors import GraphError, SpecIssue
from matpo_graph.core.loader import load_graph
from matpo_graph.core.policies import compile_policies, role_policies
from matpo_graph.core.program import CallableView, CreditPlan, Program, RoleProgram, TemplateSource
from matpo_graph.core.spec import Graph, Role, TemplateRef
from matpo_graph.core.templates import BUILTIN_TEMPLATES, resolve_template
from matpo_graph.core.trust import TrustPolicy, active_trust
from matpo_graph.core.validate import Partial, load_examples, semantic_issues, trust_issues

__all__ = [
    "PROGRAM_FILE",
    "CREDIT_PLAN_FILE",
    "MERMAID_FILE",
    "GRAPH_COPY_FILE",
    "canonical_json",
    "compile_graph",
    "compiled_trust_issues",
    "load_program",
    "normalised_graph_yaml",
    "write_compiled",
]

PROGRAM_FILE = "program.json"
CREDIT_PLAN_FILE = "credit_plan.json"
MERMAID_FILE = "graph.mmd"
GRAPH_COPY_FILE = "graph.yaml"


def canonical_json(model: BaseModel | dict[str, Any]) -> str:
    """Stable JSON text: sorted keys, two-space indent, UTF-8 kept, trailing newline."""
    data = model.model_dump(mode="json") if isinstance(model, BaseModel) else model
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _template(ref: TemplateRef | None, builtin: str, base_dir: Path) -> TemplateSource:
    if ref is None:
        source, origin = BUILTIN_TEMPLATES[builtin], f"builtin:{builtin}"
    else:
        source, origin, _ = resolve_template(ref.text, ref.file, base_dir)
    return TemplateSource(source=source, origin=origin, sha256=_sha(source))


def _role_program(graph: Graph, name: str, role: Role, base_dir: Path) -> RoleProgram:
    callables: list[CallableView] = []
    for tool_name in role.tools:
        tool = graph.tools[tool_name]
        callables.append(
            CallableView(
                name=tool_name,
                description=tool.description,
                parameters=tool.parameters,
                kind="tool",
                target=tool_name,
                max_parallel=graph.limits.max_concurrency,
                max_result_chars=tool.max_output_chars,
            )
        )
    for edge in graph.edges_from(name):
        callables.append(
            CallableView(
                name=edge.as_,
                description=edge.description,
                parameters=edge.parameters,
                kind="child",
                target=edge.to,
                max_parallel=edge.max_parallel,
                max_result_chars=edge.max_result_chars,
            )
        )
    demos = load_examples(role.examples, base_dir)
    return RoleProgram(
        name=name,
        description=role.description,
        system=_template(role.system, "", base_dir),
        user=_template(role.user, "root_user" if name == graph.root else "child_user", base_dir),
        summary=_template(role.summary_prompt, "summary", base_dir),
        examples=[[{"role": m.role, "content": m.content} for m in demo] for demo in demos],
        callables=callables,
        max_turns=role.max_turns,
        max_tokens_per_turn=role.max_tokens_per_turn,
        final_summary=role.final_summary,
        trainable=role.trainable,
        temperature=role.temperature,
        policy=role_policies({name: role}, graph.policies)[name],
    )


def compile_graph(graph: Graph, base_dir: Path, *, trust: TrustPolicy | None = None) -> tuple[Program, CreditPlan]:
    """Compile a graph whose template and example paths are relative to `base_dir`.

    Args:
        graph: a graph (normally from `load_graph`; it is checked again here).
        base_dir: the graph file's folder.
        trust: the user's policy for the code, secrets and endpoints the graph names (default: the
            active one, :func:`matpo_graph.core.trust.active_trust`).

    Returns:
        (Program, CreditPlan). `Program.graph_sha256` hashes both compiled artefacts, so it changes
        exactly when something the run depends on changes (a template file included).

    Raises:
        GraphError: the graph has semantic errors (for graphs not obtained from `load_graph`), or
            compiling failed in a way the checks did not foresee (`internal-error`); never another exception.
    """
    base_dir = Path(base_dir)
    where = f"{graph.name} (in {base_dir.name or '.'})"
    try:
        errors = [i for i in semantic_issues(Partial.from_graph(graph), base_dir, trust=trust) if i.severity == "error"]
        if errors:
            raise GraphError(where, errors)
        return _compile(graph, base_dir)
    except GraphError:
        raise
    except Exception as exc:  # noqa: BLE001 (a verdict, never a traceback)
        raise GraphError(where, [SpecIssue.at("internal-error", (), f"compiling failed: {type(exc).__name__}: {str(exc)[:300]}")]) from exc


def _compile(graph: Graph, base_dir: Path) -> tuple[Program, CreditPlan]:
    roles = {name: _role_program(graph, name, role, base_dir) for name, role in graph.roles.items()}
    used = [t for t in graph.tools if any(t in r.tools for r in graph.roles.values())]
    credit, reward = graph.credit, graph.reward
    plan = CreditPlan(
        root=graph.root,
        group_size=credit.group_size,
        strategy=credit.strategy,
        normalization=credit.normalization,
        epsilon=credit.epsilon,
        single_member=credit.single_member,
        loss_agg=credit.loss_agg,
        clip_ratio_low=credit.clip_ratio_low,
        clip_ratio_high=credit.clip_ratio_high,
        dual_clip=credit.dual_clip,
        kl_coef=credit.kl.coef,
        kl_estimator=credit.kl.estimator,
        answer_format=reward.answer_format,
        accuracy_scorer=reward.accuracy.scorer,
        accuracy_weight=reward.accuracy.weight,
        format_weight=reward.format.weight,
        no_call_score=reward.format.no_call_score,
        judge=reward.accuracy.judge.model_dump(mode="json") if reward.accuracy.judge else None,
        numeric_tolerance=reward.accuracy.numeric_tolerance,
        calling_roles=sorted(n for n, r in graph.roles.items() if r.tools or graph.edges_from(n)),
        trained_roles=sorted(n for n, r in graph.roles.items() if r.trainable),
        role_policies=dict(sorted(role_policies(graph.roles, graph.policies).items())),
    )
    program = Program(
        graph_name=graph.name,
        graph_sha256="",
        root=graph.root,
        tool_call_format=graph.tool_call_format,
        answer_format=reward.answer_format,
        roles=roles,
        tools={t: graph.tools[t].model_dump(mode="json") for t in used},
        max_depth=graph.limits.max_depth,
        context_tokens=graph.limits.context_tokens,
        summary_reserve=graph.limits.summary_reserve,
        tree_seconds=graph.limits.tree_seconds,
        tree_tokens=graph.limits.tree_tokens,
        max_concurrency=graph.limits.max_concurrency,
        policies=compile_policies(graph.roles, graph.policies),
    )
    digest = _sha(canonical_json(program) + canonical_json(plan))
    return program.model_copy(update={"graph_sha256": digest}), plan


def normalised_graph_yaml(graph: Graph, base_dir: Path) -> str:
    """The graph with defaults filled in and template/example files inlined: loads back on its own."""
    data = graph.model_dump(mode="json", by_alias=True, exclude_none=True)
    for name, role in graph.roles.items():
        raw = data["roles"][name]
        for part in ("system", "user", "summary_prompt"):
            ref: TemplateRef | None = getattr(role, part)
            if ref is not None:
                raw[part] = {"text": resolve_template(ref.text, ref.file, base_dir)[0]}
        raw["examples"] = [[m.model_dump(mode="json") for m in demo] for demo in load_examples(role.examples, base_dir)]
    header = f"# {graph.name}: normalised copy (defaults filled in, template and example files inlined)\n"
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def write_compiled(graph: Graph, base_dir: Path, out_dir: Path, *, trust: TrustPolicy | None = None) -> tuple[Program, CreditPlan]:
    """Compile and write program.json, credit_plan.json, graph.mmd and graph.yaml into `out_dir`."""
    from matpo_graph.compilers.mermaid import to_mermaid  # noqa: PLC0415 (keeps this module's imports minimal)

    program, plan = compile_graph(graph, base_dir, trust=trust)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        PROGRAM_FILE: canonical_json(program),
        CREDIT_PLAN_FILE: canonical_json(plan),
        MERMAID_FILE: to_mermaid(graph),
        GRAPH_COPY_FILE: normalised_graph_yaml(graph, base_dir),
    }
    for name, text in files.items():
        (out_dir / name).write_text(text, encoding="utf-8")
    return program, plan


def load_program(path: str | Path, *, trust: TrustPolicy | None = None) -> tuple[Program, CreditPlan]:
    """Program and CreditPlan from a graph YAML file (compiled on the fly) or a compiled folder.

    A compiled folder is checked against `trust` too (the code, secrets and endpoints it names),
    since it may come from a stranger as well.

    Raises:
        GraphError: the graph file is invalid, or the folder lacks program.json / credit_plan.json,
            or names what the trust policy does not allow.
    """
    path = Path(path)
    if path.is_dir():
        missing = [f for f in (PROGRAM_FILE, CREDIT_PLAN_FILE) if not (path / f).is_file()]
        if missing:
            raise GraphError(
                str(path),
                [SpecIssue.at("file-not-found", (), f"not a compiled graph folder: missing {', '.join(missing)}", "run `matpo-graph compile GRAPH -o DIR` first")],
            )
        try:
            program = Program.model_validate_json((path / PROGRAM_FILE).read_text(encoding="utf-8"))
            plan = CreditPlan.model_validate_json((path / CREDIT_PLAN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise GraphError(str(path), [SpecIssue.at("invalid-value", (), f"not a readable compiled graph: {first}")]) from exc
        problems = compiled_trust_issues(program, plan, trust if trust is not None else active_trust())
        if problems:
            raise GraphError(str(path), problems)
        return program, plan
    graph = load_graph(path, trust=trust)
    return compile_graph(graph, path.parent, trust=trust)


def compiled_trust_issues(program: Program, plan: CreditPlan, trust: TrustPolicy) -> list[SpecIssue]:
    """The trust checks of validation, applied to a compiled program and plan."""
    from matpo_graph.core.spec import AccuracySpec, CreditSpec, JudgeSpec, RewardSpec, ToolSpec  # noqa: PLC0415

    tools = {}
    for name, raw in program.tools.items():
        try:
            tools[name] = ToolSpec.model_validate(raw)
        except ValueError as exc:
            return [SpecIssue.at("invalid-value", ("tools", name), f"program.json: invalid tool: {str(exc)[:200]}")]
    judge = JudgeSpec.model_validate(plan.judge) if plan.judge else None
    accuracy = AccuracySpec.model_construct(scorer=plan.accuracy_scorer, judge=judge)
    partial = Partial(
        root=program.root, roles={}, tools=tools, edges=[], limits=None, max_depth_explicit=True,
        credit=CreditSpec.model_construct(strategy=plan.strategy), reward=RewardSpec.model_construct(accuracy=accuracy),
    )
    return trust_issues(partial, trust)
