"""The policies of a run whose graph declares several (``policies:``), read back from a checkpoint.

Such a checkpoint holds one state dict per model (``base::<key>``, ``<separate>::<key>``), the lora
policies as named adapters inside the base. Rather than re-deriving that layout, the run's own
:class:`~matpo_graph.rl.update_per_role.PolicySet` is rebuilt and the checkpoint loaded into it, exactly as a
resumed run does; from there one policy becomes a plain model (``export --policy NAME``: the shared base,
the base with one adapter merged, or a separate model) or every trained policy is served to an engine
(``eval`` of the run folder), through the same ``sync`` the trainer uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matpo_graph.core.policies import bound_policy_names
from matpo_graph.rl.run_folder import ExportError, checkpoint_base, pick_checkpoint, run_policies, train_config

__all__ = ["PerRolePolicies", "run_policies"]


class PerRolePolicies:
    """A per-role run's policies at one checkpoint (or at the start of RL when it has none yet).

    Raises:
        ExportError: not a run folder, or no checkpoint for `step`.
    """

    def __init__(self, run_dir: Path, *, step: int | None = None) -> None:
        from matpo_graph.compilers.local import load_program
        from matpo_graph.rl.config import TrainConfig
        from matpo_graph.rl.update_per_role import PolicySet

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
        return bound_policy_names(self.program)

    def model_dir(self, name: str) -> Path:
        """The folder policy `name` started from (its tokenizer and config)."""
        return self.policies.separate_dirs.get(name, self.base_dir)

    def hf_model(self, name: str) -> Any:
        """Policy `name` as a plain transformers model (float32): adapters merged or left out, as it serves."""
        from matpo_graph.model.loading import load_causal_lm

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
        model = load_causal_lm(self.model_dir(name))
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
