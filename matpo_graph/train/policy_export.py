"""The policies of a run whose graph declares several (``policies:``), read back from a checkpoint.

Such a checkpoint holds one state dict per model (``base::<key>``, ``<separate>::<key>``), the lora
policies as named adapters inside the base. Rather than re-deriving that layout, the run's own
:class:`~matpo_graph.train.policy_set.PolicySet` is rebuilt and the checkpoint loaded into it, exactly as a
resumed run does; from there one policy becomes a plain model (``export --policy NAME``: the shared base,
the base with one adapter merged, or a separate model) or every trained policy is served to an engine
(``eval`` of the run folder), through the same ``sync`` the trainer uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matpo_graph.train.export import ExportError, checkpoint_base, pick_checkpoint, train_config

__all__ = ["PerRolePolicies", "run_policies"]


def _bound_names(program: Any) -> list[str]:
    """The policies the program's roles are bound to, the shared one first."""
    from matpo_graph.train.policy_set import shared_policy_name

    shared = shared_policy_name(program)
    bound = list(dict.fromkeys(program.role_policies().values()))
    return [shared] * (shared in bound) + [n for n in bound if n != shared]


def run_policies(run_dir: Path) -> list[str] | None:
    """The policies of a run whose graph binds a role to a lora or separate policy (its checkpoints hold several
    models or adapters, ``<policy>::<key>``), the shared one first; None for a run of the one shared policy."""
    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.policies import uses_per_role_policies

    run_dir = Path(run_dir)
    if not (run_dir / "program.json").is_file():
        return None
    program, _ = load_program(run_dir)
    return _bound_names(program) if uses_per_role_policies(program) else None


class PerRolePolicies:
    """A per-role run's policies at one checkpoint (or at the start of RL when it has none yet).

    Raises:
        ExportError: not a run folder, or no checkpoint for `step`.
    """

    def __init__(self, run_dir: Path, *, step: int | None = None) -> None:
        from matpo_graph.compilers.local import load_program
        from matpo_graph.train.config import TrainConfig
        from matpo_graph.train.policy_set import PolicySet

        self.run_dir = Path(run_dir)
        cfg = TrainConfig.model_validate(train_config(self.run_dir))
        self.program, self.plan = load_program(self.run_dir)
        self.base_dir = checkpoint_base(self.run_dir)
        self.checkpoint = pick_checkpoint(self.run_dir, step) if step != 0 else None
        temperatures = {n: r.temperature for n, r in self.program.roles.items()}
        self.policies = PolicySet(self.program, self.plan, cfg, self.base_dir, role_temperatures=temperatures)
        self.step = 0
        if self.checkpoint is not None:
            import json

            from safetensors.torch import load_file

            self.policies.model.load_state_dict(load_file(str(self.checkpoint / "model.safetensors")))
            self.step = int(json.loads((self.checkpoint / "state.json").read_text()).get("step", 0))

    @property
    def names(self) -> list[str]:
        """Every policy a role is bound to, the shared one first."""
        return _bound_names(self.program)

    def model_dir(self, name: str) -> Path:
        """The folder policy `name` started from (its tokenizer and config)."""
        return self.policies.separate_dirs.get(name, self.base_dir)

    def hf_model(self, name: str) -> Any:
        """Policy `name` as a plain transformers model (float32): adapters merged or left out, as it serves."""
        import torch
        from transformers import AutoModelForCausalLM

        if name not in self.names:
            raise ExportError(f"{self.run_dir}: no policy {name!r}; its graph's policies: {', '.join(self.names)}")
        ps = self.policies
        if name in ps.lora_specs:
            ps.activate(name)
            return ps.peft.merge_and_unload(adapter_names=[name])  # this set is spent afterwards
        if name in ps.separate_dirs:
            member = ps.members.get(name)
            state = member.state_dict_for_engine() if member is not None else None
        else:
            state = ps.base_state_dict()
        model = AutoModelForCausalLM.from_pretrained(str(self.model_dir(name)), dtype=torch.float32)
        if state is not None:
            result = model.load_state_dict(state, strict=False)
            missing = [k for k in result.missing_keys if not k.endswith("lm_head.weight")]
            if missing or result.unexpected_keys:
                raise ExportError(f"policy {name!r} of {self.checkpoint} does not fit {self.model_dir(name)}: "
                                  f"missing {missing[:5]}, unexpected {list(result.unexpected_keys)[:5]}")
        return model

    def serve(self, session: Any) -> float:
        """Load every trained policy's weights into a rollout session's engines (as after a training step)."""
        if self.checkpoint is None:
            return 0.0  # the engines already serve the models RL started from (untrained adapters change nothing)
        return self.policies.sync(session, self.step)
