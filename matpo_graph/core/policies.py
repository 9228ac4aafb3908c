"""Policy bindings: which weights play each role (shared, a LoRA adapter, a separate model).

Rules, checked by :func:`policy_issues` and applied by :func:`compile_policies`:

- A graph without `policies:` plays every role with one shared policy, named ``shared`` (today's MATPO).
- At most one policy has ``kind: shared``; roles without ``policy:`` use it (or the implicit ``shared``).
  The name ``shared`` belongs to that policy: a lora or separate policy may not take it.
- Several roles may name the same lora policy: one adapter for a named group of roles.
- A policy no role uses is a warning (like an unused tool): it costs nothing, but is usually a typo.
- Fields belong to kinds: ``rank``, ``alpha``, ``dropout``, ``target_modules`` to lora; ``model`` to
  separate, where it is required. A separate model's tokenizer must equal the base model's; that needs
  the model folders, so the core records the requirement and the runtime checks it.

Binding a role to a policy never changes credit: the advantage comes from the root's reward alone.
Pure: no I/O, no heavy imports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matpo_graph.core.errors import SpecIssue, did_you_mean
from matpo_graph.core.program import PolicyProgram, Program
from matpo_graph.core.rollout import RolloutTree
from matpo_graph.core.spec import DEFAULT_POLICY, LORA_DEFAULTS, PolicySpec, Role

__all__ = [
    "LORA_FIELDS",
    "bound_policy_names",
    "compile_policies",
    "default_policy_name",
    "policy_issues",
    "policy_partition",
    "role_policies",
    "shared_policy_name",
    "uses_per_role_policies",
]

LORA_FIELDS: tuple[str, ...] = ("rank", "alpha", "dropout", "target_modules")
_SEPARATE_FIELDS: tuple[str, ...] = ("model",)
_TRAINED_APART_FIELDS: tuple[str, ...] = ("lr",)  # a policy with an optimizer of its own: lora and separate


def default_policy_name(policies: Mapping[str, PolicySpec | None]) -> str:
    """The policy of roles without `policy:`: the declared shared policy, else the implicit ``shared``."""
    return next((n for n, p in policies.items() if p is not None and p.kind == "shared"), DEFAULT_POLICY)


def role_policies(roles: Mapping[str, Role | None], policies: Mapping[str, PolicySpec | None]) -> dict[str, str]:
    """role -> policy name, the default filled in (roles that failed their shape check are left out)."""
    default = default_policy_name(policies)
    return {name: (role.policy or default) for name, role in roles.items() if role is not None}


def compile_policies(roles: Mapping[str, Role], policies: Mapping[str, PolicySpec]) -> dict[str, PolicyProgram]:
    """The used and declared policies with defaults filled in; the shared policy is always present."""
    default = default_policy_name(policies)
    out: dict[str, PolicyProgram] = {}
    if default not in policies:
        out[default] = PolicyProgram(name=default, kind="shared")
    for name, spec in policies.items():
        if spec.kind == "lora":
            rank = spec.rank if spec.rank is not None else int(LORA_DEFAULTS["rank"])
            out[name] = PolicyProgram(
                name=name, kind="lora", rank=rank,
                alpha=float(spec.alpha) if spec.alpha is not None else float(2 * rank),
                dropout=spec.dropout if spec.dropout is not None else float(LORA_DEFAULTS["dropout"]),
                target_modules=spec.target_modules if spec.target_modules is not None else LORA_DEFAULTS["target_modules"],
                lr=spec.lr,
            )
        elif spec.kind == "separate":
            out[name] = PolicyProgram(name=name, kind="separate", model=spec.model, lr=spec.lr, requires_base_tokenizer=True)
        else:
            out[name] = PolicyProgram(name=name, kind="shared")
    return dict(sorted(out.items()))


def policy_issues(roles: Mapping[str, Role | None], policies: Mapping[str, PolicySpec | None]) -> list[SpecIssue]:
    """Unknown references, unused policies, a second shared policy, the reserved name, fields of the wrong kind."""
    out: list[SpecIssue] = []
    names = list(policies)
    shared = [n for n, p in policies.items() if p is not None and p.kind == "shared"]
    for extra in shared[1:]:
        out.append(SpecIssue.at(
            "name-collision", ("policies", extra, "kind"),
            f"policy {extra!r} is a second shared policy (the first is {shared[0]!r}); the shared policy is the one "
            "set of weights every role without `policy:` uses",
            "bind roles to it by leaving out `policy:`, or make this one lora or separate",
        ))
    reserved = policies.get(DEFAULT_POLICY)
    if reserved is not None and reserved.kind != "shared":
        out.append(SpecIssue.at(
            "name-collision", ("policies", DEFAULT_POLICY),
            f"the name {DEFAULT_POLICY!r} belongs to the shared policy, but this one is {reserved.kind}",
            "give it another name",
        ))
    for name, spec in policies.items():
        if spec is not None:
            out += _field_issues(name, spec)
    used: set[str] = set()
    default = default_policy_name(policies)
    for rname, role in roles.items():
        if role is None:
            continue
        if role.policy is None:
            used.add(default)
            continue
        used.add(role.policy)
        if role.policy not in policies and role.policy != default:
            hint = did_you_mean(role.policy, [*names, default]) or (
                f"declared policies: {', '.join(sorted(names))}" if names else "declare it under the top-level 'policies:' key"
            )
            out.append(SpecIssue.at("unknown-policy", ("roles", rname, "policy"), f"unknown policy {role.policy!r}", hint))
    if all(r is not None for r in roles.values()):
        for name in policies:
            if name not in used:
                out.append(SpecIssue.at(
                    "unused-policy", ("policies", name), f"policy {name!r} is not used by any role",
                    "bind a role to it with `policy:`, or remove it", severity="warning",
                ))
    return out


def _field_issues(name: str, spec: PolicySpec) -> list[SpecIssue]:
    out: list[SpecIssue] = []
    fields = (*LORA_FIELDS, *_SEPARATE_FIELDS, *_TRAINED_APART_FIELDS)
    given: dict[str, Any] = {f: getattr(spec, f) for f in fields if getattr(spec, f) is not None}
    allowed = {"lora": (*LORA_FIELDS, *_TRAINED_APART_FIELDS), "separate": (*_SEPARATE_FIELDS, *_TRAINED_APART_FIELDS)}.get(spec.kind, ())
    for field, _ in given.items():
        if field not in allowed:
            if field in _TRAINED_APART_FIELDS:  # the shared policy trains with the run's own settings
                out.append(SpecIssue.at(
                    "invalid-value", ("policies", name, field),
                    f"{field!r} applies to lora and separate policies only; the shared policy {name!r} trains with "
                    f"the run's {field}",
                    f"remove it and pass --{field} to `matpo-graph train`, or make the policy lora or separate",
                ))
                continue
            owner = "lora" if field in LORA_FIELDS else "separate"
            out.append(SpecIssue.at(
                "invalid-value", ("policies", name, field),
                f"{field!r} applies to {owner} policies only; policy {name!r} is {spec.kind}",
                f"remove it, or set `kind: {owner}`",
            ))
    if spec.kind == "separate" and not (spec.model or "").strip():
        out.append(SpecIssue.at(
            "missing-key", ("policies", name, "model") if spec.model is not None else ("policies", name),
            f"separate policy {name!r} needs a `model`: a local model folder, the embedded model's name or a Hub id",
        ))
    if spec.kind == "lora" and isinstance(spec.target_modules, list):
        if not spec.target_modules:
            out.append(SpecIssue.at(
                "invalid-value", ("policies", name, "target_modules"),
                "an empty target_modules list gives the adapter nothing to train",
                "list module names such as [q_proj, v_proj], or use all-linear",
            ))
        for i, module in enumerate(spec.target_modules):
            if not module.strip():
                out.append(SpecIssue.at("invalid-value", ("policies", name, "target_modules", i), "a module name may not be empty"))
    return out


def policy_partition(trees: Sequence[RolloutTree], *, trained_roles: Sequence[str] | None = None) -> dict[str, list[tuple[str, str]]]:
    """Which policy trains which trajectory: (tree_id, traj_id) of every trained row, by the trajectory's policy.

    Rows are chosen as the batch packer chooses them (an advantage, at least one trained token, a trained
    role), so a policy's optimizer sees exactly these rows and nothing else. Policies in sorted order.
    """
    out: dict[str, list[tuple[str, str]]] = {}
    for tree in trees:
        for t in tree.trajectories:
            if t.advantage is None or t.num_trained_tokens == 0:
                continue
            if trained_roles is not None and t.role not in trained_roles:
                continue
            out.setdefault(t.policy, []).append((tree.tree_id, t.traj_id))
    return dict(sorted(out.items()))


def uses_per_role_policies(program: Program) -> bool:
    """Whether some role is played by a lora or separate policy (else one shared model plays every role)."""
    used = set(program.role_policies().values())
    return any(p.kind != "shared" for n, p in program.policies.items() if n in used)


def shared_policy_name(program: Program) -> str:
    """The name of the graph's shared policy (the implicit ``shared`` when it declares none)."""
    return default_policy_name(program.policies)  # type: ignore[arg-type]  # program policies carry `kind` too


def bound_policy_names(program: Program) -> list[str]:
    """The policies the program's roles are bound to, the shared one first."""
    shared = shared_policy_name(program)
    bound = list(dict.fromkeys(program.role_policies().values()))
    return [shared] * (shared in bound) + [n for n in bound if n != shared]
