"""The local trainer's policies for a graph with several (``policies:``): one optimizer each, own rows only.

Layout in memory: one base model (float32). Every lora policy is a named peft adapter on that one model:
peft keeps several adapters side by side, switching is a flag per layer, the frozen base is held once, and
the adapters' parameters are disjoint, so one AdamW per adapter is simply an optimizer over its own
parameters. (One PeftModel per policy would not share the base: peft injects its layers into the model it
wraps.) The shared policy trains the base itself, as today, with the adapters switched off, and only when a
trained role is bound to it; otherwise the base stays frozen. A separate policy is a model of its own with
its own optimizer, and must use the base model's tokenizer.

Each RL step packs the whole augmented batch once (weights over the whole step, see
:mod:`matpo_graph.rl.batch`), splits its rows by policy, and lets each policy's optimizer take the step's
K AdamW steps over its own rows only; a policy whose roles generated no trained token in the step takes no
step at all (its weights stay exactly as they were). The shared base steps last, so every policy's gradient
is taken at the weights the step started from (an adapter's rows depend on the base as well). Metrics are namespaced
``policy/<name>/...``; the step's own ``loss`` and ``pg_loss`` are the sums over policies (they equal the shared
loss's definition), ``grad_norm`` the largest.

A graph whose every role is on the shared policy never comes here: the trainer uses
:class:`~matpo_graph.rl.update.PolicyOptimizer` exactly as before.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from matpo_graph.core.policies import shared_policy_name
from matpo_graph.core.program import CreditPlan, PolicyProgram, Program
from matpo_graph.core.rollout import RolloutTree
from matpo_graph.model.forward import ForwardEngine
from matpo_graph.rl.batch import pack_trees, split_by_policy
from matpo_graph.rl.config import TrainConfig
from matpo_graph.rl.update import PolicyOptimizer
from matpo_graph.runtime.policies.per_role import check_same_tokenizer

__all__ = ["PolicySet", "PolicySetError", "shared_policy_name"]

_KEY_SEP = "::"
_TOKEN_MEANS = ("ppo_kl", "clip_fraction", "kl", "kl_ref", "entropy", "matpo/engine_trainer_logprob_gap")


class PolicySetError(ValueError):
    """The graph's policies cannot be trained as declared (a conflicting setting, a checkpoint that does not fit)."""


def _lora_config(spec: PolicyProgram) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=int(spec.rank or 8), lora_alpha=float(spec.alpha or 2 * (spec.rank or 8)),
                      lora_dropout=float(spec.dropout or 0.0), target_modules=spec.target_modules or "all-linear")


class _CompositeModel:
    """Every policy's weights as one state dict (``<policy>::<key>``), for the trainer's atomic checkpoints."""

    def __init__(self, models: Mapping[str, Any]) -> None:
        self.models = dict(models)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {f"{name}{_KEY_SEP}{k}": v for name, m in self.models.items() for k, v in m.state_dict().items()}

    def load_state_dict(self, weights: Mapping[str, torch.Tensor], strict: bool = False) -> None:
        for name, m in self.models.items():
            prefix = f"{name}{_KEY_SEP}"
            own = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
            if not own:
                raise PolicySetError(f"the checkpoint holds no weights of policy {name!r}")
            m.load_state_dict(own, strict=strict)


class _CompositeOptimizer:
    """Every trained policy's AdamW state, keyed by policy."""

    def __init__(self, optimizers: Mapping[str, torch.optim.Optimizer]) -> None:
        self.optimizers = dict(optimizers)

    def state_dict(self) -> dict[str, Any]:
        return {name: opt.state_dict() for name, opt in self.optimizers.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = sorted(set(self.optimizers) - set(state))
        if missing:
            raise PolicySetError(f"the checkpoint holds no optimizer state of policy(ies) {', '.join(missing)}")
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state[name])


class PolicySet:
    """The models and optimizers of a graph's policies; `train_step` trains each on its own rows.

    Args:
        program: the compiled graph (its policies and role bindings).
        plan: its credit plan.
        cfg: the run's settings (learning rate, steps per RL step, precision, `train_layers` for the base).
        model_dir: the base model (after the warm-up, if any).
        role_temperatures: sampling temperature by role, as for PolicyOptimizer.

    Raises:
        PolicySetError: `lora_rank` set together with lora policies.
        TokenizerMismatchError: a separate model whose tokenizer differs from the base model's.
    """

    def __init__(self, program: Program, plan: CreditPlan, cfg: TrainConfig, model_dir: Path,
                 role_temperatures: Mapping[str, float | None] | None = None) -> None:
        from matpo_graph.runtime.models import resolve_model

        self.program, self.plan, self.cfg = program, plan, cfg
        self.base_dir = Path(model_dir)
        self.shared = shared_policy_name(program)
        bound = program.role_policies()
        trained_bindings = {bound[r] for r in plan.trained_roles if r in bound}
        self.lora_specs = {n: p for n, p in program.policies.items() if p.kind == "lora" and n in bound.values()}
        separate = {n: p for n, p in program.policies.items() if p.kind == "separate" and n in bound.values()}
        if self.lora_specs and cfg.lora_rank > 0:
            raise PolicySetError(f"lora_rank={cfg.lora_rank} makes the shared policy a LoRA adapter, which cannot sit beside "
                                 f"the graph's lora policies ({', '.join(self.lora_specs)}): declare it as a lora policy instead")
        self.base = PolicyOptimizer(self.base_dir, plan, cfg, role_temperatures=role_temperatures)
        self.pad_id = self.base.pad_id
        self._shared_params = [p for p in self.base.model.parameters() if p.requires_grad]
        self.members: dict[str, PolicyOptimizer] = {}
        self._params: dict[str, list[torch.nn.Parameter]] = {}
        if self.shared in trained_bindings:
            self.members[self.shared] = self.base
            self._params[self.shared] = self._shared_params
        self.peft: Any = None
        if self.lora_specs:
            self._add_adapters(trained_bindings)
        for name, spec in separate.items():
            other = resolve_model(str(spec.model))
            check_same_tokenizer(self.base_dir, other, policy=name)
            own = cfg if spec.lr is None else cfg.model_copy(update={"lr": spec.lr})
            self.members[name] = PolicyOptimizer(other, plan, own, role_temperatures=role_temperatures)
        self.separate_dirs = {name: resolve_model(str(spec.model)) for name, spec in separate.items()}
        self.last_sync_differences: dict[str, float] = {}  # of the latest sync_difference, per trained policy
        self._freeze_all()

    # ---------------------------------------------------------------- set-up

    def _add_adapters(self, trained: set[str]) -> None:
        from peft import get_peft_model

        names = list(self.lora_specs)
        model = get_peft_model(self.base.model, _lora_config(self.lora_specs[names[0]]), adapter_name=names[0])
        for name in names[1:]:
            model.add_adapter(name, _lora_config(self.lora_specs[name]))
        self.peft = model
        self.base.model = model  # the PolicyOptimizers share this model and its forward engine
        if self.base.forward is not None:
            self.base.forward = ForwardEngine(model, precision=self.cfg.precision, frozen_precision="fp32")
        for name in names:
            params = [p for n, p in model.named_parameters() if f".lora_A.{name}." in n or f".lora_B.{name}." in n]
            if not params:
                raise PolicySetError(f"lora policy {name!r}: no adapter parameters were created (target_modules?)")
            self._params[name] = params
            if name in trained:
                member = copy.copy(self.base)
                lr = self.lora_specs[name].lr or self.cfg.lr  # the policy's own, else the run's
                member.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=self.cfg.weight_decay)
                self.members[name] = member

    def _freeze_all(self) -> None:
        for params in [self._shared_params, *self._params.values()]:
            for p in params:
                p.requires_grad_(False)

    def activate(self, name: str) -> PolicyOptimizer | None:
        """Make `name` the policy the shared model computes (its adapter on, or all adapters off for the shared
        policy) and the only one with trainable parameters; returns its optimizer (None when it trains nothing)."""
        if self.peft is not None and name in self.lora_specs:
            self.peft.base_model.enable_adapter_layers()
            self.peft.base_model.set_adapter(name)
        elif self.peft is not None and name not in self.separate_dirs:
            self.peft.base_model.disable_adapter_layers()
        self._freeze_all()
        for p in self._params.get(name, []):
            p.requires_grad_(True)
        return self.members.get(name)

    # ---------------------------------------------------------------- what the trainer calls

    @property
    def trained_policies(self) -> list[str]:
        return list(self.members)

    @property
    def model(self) -> _CompositeModel:
        models = {"base": self.base.model, **{n: self.members[n].model for n in self.separate_dirs if n in self.members}}
        return _CompositeModel(models)

    def use_configured_lr(self) -> dict[str, tuple[float, float]]:
        """Each trained policy's configured learning rate back in place after a resume, by policy name."""
        return {name: lrs for name, member in self.members.items() for lrs in member.use_configured_lr().values()}

    @property
    def optimizer(self) -> _CompositeOptimizer:
        return _CompositeOptimizer({n: m.optimizer for n, m in self.members.items()})

    def train_step(self, trees: list[RolloutTree]) -> dict[str, float]:
        """One RL step: pack once, split the rows by policy, K AdamW steps per trained policy on its own rows."""
        batch = pack_trees(trees, loss_agg=self.plan.loss_agg, pad_token_id=self.pad_id,
                           trained_roles=self.plan.trained_roles)
        parts = split_by_policy(batch)
        strays = sorted(set(parts) - set(self.members))
        if strays:
            raise PolicySetError(f"rows of policy(ies) {', '.join(strays)} but no optimizer for them; trajectories "
                                 "must record a policy of the graph")
        out: dict[str, float] = {"loss": 0.0, "pg_loss": 0.0, "grad_norm": 0.0, "trained_rows": float(len(batch)),
                                 "trained_tokens": float(batch.num_trained_tokens),
                                 "optimizer_steps": float(self.cfg.optimizer_steps_per_rl_step)}
        sums: dict[str, float] = {}  # token-weighted means over the policies, under the usual names
        weight = 0.0
        for name in self._update_order():
            if name not in parts:  # its roles generated nothing this step: nothing to train, weights untouched
                out[f"policy/{name}/trained_rows"] = 0.0
                out[f"policy/{name}/optimizer_steps"] = 0.0
                continue
            member = self.activate(name)
            assert member is not None
            metrics = member.train_packed(parts[name])
            out.update({f"policy/{name}/{k}": v for k, v in metrics.items()})
            out["loss"] += float(metrics.get("loss", 0.0))
            out["pg_loss"] += float(metrics.get("pg_loss", 0.0))
            out["grad_norm"] = max(out["grad_norm"], float(metrics.get("grad_norm", 0.0)))
            tokens = float(metrics.get("trained_tokens", 0.0))
            for key in _TOKEN_MEANS:
                if key in metrics:
                    sums[key] = sums.get(key, 0.0) + tokens * float(metrics[key])
            weight += tokens
        self._freeze_all()
        out.update({key: v / weight for key, v in sums.items()} if weight else {})
        return out

    def _update_order(self) -> list[str]:
        """Adapters and separate models first, the shared base last: an adapter's rows depend on the base too, so
        stepping the base last evaluates every policy's gradient at the weights its rows were sampled with (the
        shared rows run with adapters off and do not see the adapters' steps)."""
        return [n for n in self.members if n != self.shared] + [n for n in self.members if n == self.shared]

    def base_state_dict(self) -> dict[str, torch.Tensor]:
        """The base model's weights in HF names (adapters left out, lm_head included), for the shared engine."""
        if self.peft is None:
            return self.base.state_dict_for_engine()
        inner = self.peft.get_base_model()
        sd = {k.replace(".base_layer", ""): v.detach() for k, v in inner.state_dict().items() if "lora_" not in k}
        if "lm_head.weight" not in sd and "model.embed_tokens.weight" in sd:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        return sd

    def save_adapter(self, name: str, folder: Path) -> Path:
        """Write lora policy `name` as a peft adapter folder (adapter_config.json, adapter_model.safetensors)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.peft.save_pretrained(str(folder), selected_adapters=[name])
        out = folder / name
        return out if (out / "adapter_config.json").exists() else folder

    def sync(self, session: Any, step: int, *, adapters_only: bool = False) -> float:
        """Serve the new weights: the trained base (if the shared policy trains), every trained adapter as a new
        version, every trained separate model (`adapters_only`: the adapters alone, as at the start of a run, when
        the engines already serve the base and separate models). Returns the seconds taken."""
        seconds = 0.0
        if self.shared in self.members and not adapters_only:
            seconds += session.load_policy_weights(self.shared, self.base_state_dict())
        for name in self.lora_specs:
            if name in self.members:
                folder = session.adapter_folder(name, step)
                seconds += session.load_adapter(name, self.save_adapter(name, folder))
        for name in self.separate_dirs:
            if name in self.members and not adapters_only:
                seconds += session.load_policy_weights(name, self.members[name].state_dict_for_engine())
        return seconds

    def sequence_logprobs(self, policy: str, token_ids: list[int]) -> list[float]:
        """Per-token logprobs of a fixed sequence under `policy`'s current weights (sync checks)."""
        member = self.members.get(policy) or self.base
        if policy in self.separate_dirs:
            return member.sequence_logprobs(token_ids)
        self.activate(policy)
        try:
            return self.base.sequence_logprobs(token_ids)
        finally:
            self._freeze_all()

    def sync_difference(self, session: Any, token_ids: list[int]) -> dict[str, float]:
        """Largest |engine - trainer| logprob over a fixed sequence, per trained policy."""
        out: dict[str, float] = {}
        for name in self.members:
            engine = session.policy_logprobs(name, token_ids)
            if engine is None:
                continue
            trainer = self.sequence_logprobs(name, token_ids)
            out[name] = max(abs(a - b) for a, b in zip(engine, trainer, strict=True))
        self.last_sync_differences = out
        return out

