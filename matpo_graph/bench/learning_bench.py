"""The learning benchmark's plan and state: configurations, folder layout, and what is already done, read from files.

Does RL improve held-out accuracy? Each configuration (a graph x a tool setting) is warmed up with the same
trained-token budget, trained for the same RL steps on the same question order, and evaluated on one fixed
held-out set at step 0 (the warm-up model) and every K steps. Every piece of work leaves a file behind, and
this module only reads those files, so an interrupted benchmark continues where it stopped and never redoes
a finished warm-up, training step or evaluation. Running the pieces (subprocesses) is `scripts/bench_learning.py`'s job.

Layout under the output folder::

    bench.json                          settings that must not change between sittings
    log.jsonl                           one line per finished piece of work, with its wall time
    graphs/<variant>.yaml               self-contained graph copies (templates inlined, tree budget applied)
    graphs/<variant>.rl.yaml            the copy RL trains with, when credit settings edit it (warm-up and
                                        step-0 evaluation keep the plain copy, so folders may share them)
    warmup/<variant>/                   `matpo-graph sft` output; done once metrics_sft.jsonl has its summary
    runs/<config>/                      a `matpo-graph train` run folder (sft -> ../../warmup/<variant>)
    runs/<config>/evals/step_N.json     one evaluation: per-question accuracies (written last, atomically)
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from matpo_graph.core.rollout import RolloutTree

__all__ = [
    "CONFIGS", "DEFAULT_CONFIGS", "VARIANTS", "Action", "BenchConfig", "BenchLayout", "BenchSettings", "ConfigState",
    "EvalPoint", "SettingsMismatch", "append_log", "config_state", "edit_credit", "gzip_file", "has_checkpoint", "plan_actions",
    "read_eval_point", "read_log", "select_configs", "summarise_eval", "trained_step", "warmup_summary",
    "write_eval_point",
]

VARIANTS: dict[str, tuple[str, str]] = {
    "deep_search": ("graphs/deep_search.yaml", "MATPO (deep_search)"),
    "single_agent": ("graphs/single_agent.yaml", "single agent (GRPO)"),
    "deep_search_no_summary": ("graphs/deep_search_no_summary.yaml", "MATPO, no worker summary"),
    "deep_search_no_recap": ("graphs/deep_search_no_recap.yaml", "MATPO, no query recap"),
}
"""variant -> (graph file relative to the repository, label)."""

SETTINGS: dict[str, str | None] = {"clean": None, "noisy": "paper"}
"""tool setting -> the embedded web's noise preset (see matpo_graph/env/noise.py)."""


@dataclass(frozen=True)
class BenchConfig:
    """One configuration: a graph variant under one tool setting."""

    variant: str
    setting: str

    @property
    def name(self) -> str:
        return f"{self.variant}-{self.setting}"

    @property
    def noise(self) -> str | None:
        return SETTINGS[self.setting]

    @property
    def graph_file(self) -> str:
        return VARIANTS[self.variant][0]

    @property
    def label(self) -> str:
        return f"{VARIANTS[self.variant][1]}, {self.setting}"


CONFIGS: dict[str, BenchConfig] = {
    c.name: c for c in (BenchConfig(v, s) for v in VARIANTS for s in SETTINGS)
}
DEFAULT_CONFIGS: tuple[str, ...] = (
    "deep_search-clean", "single_agent-clean", "deep_search-noisy", "single_agent-noisy",
    "deep_search_no_summary-clean", "deep_search_no_recap-clean",
)


class SettingsMismatch(ValueError):
    """The output folder was started with settings that make its finished pieces incomparable with new ones."""


@dataclass(frozen=True)
class BenchSettings:
    """What every configuration shares. `steps` and `eval_every` may grow between sittings; the rest may not."""

    steps: int = 30
    eval_every: int = 10
    eval_questions: int = 48
    samples: int = 4
    questions_per_step: int = 2
    seed: int = 0
    warmup_tokens: int = 33_000
    """Trained (loss-mask) tokens of every warm-up: the default warm-up of deep_search trains 33,801 on 40
    demonstrations + 80 drill trees, single_agent's 14,488 on as many, so both are cut to one budget."""
    warmup_demos: int = 100
    """Demonstrations and drill trees asked of the expert; the token budget takes them 1:2 until it is spent."""
    warmup_drills: int = 200
    tree_tokens: int | None = 8192
    """limits.tree_tokens of every graph copy (None: the graph's own); cuts runaway trees only."""
    tree_seconds: float | None = None
    """limits.tree_seconds (None: the graph's own). Off: wall time would make accuracy depend on the machine's load."""
    lr: float | None = None
    """RL learning rate of every configuration (None: the trainer's default); one folder per rate keeps curves apart."""
    temperature: float | None = None
    """Sampling temperature of the RL rollouts (None: the trainer's default). Evaluations always sample at the
    eval default, so curves of different folders stay comparable."""

    train_settings: tuple[str, ...] = ()
    """Further `matpo-graph train` KEY=VALUE settings of every RL run (e.g. ``optimizer_steps_per_rl_step=2``),
    so that an update lever is measured under the same budget as the default."""
    credit_settings: tuple[str, ...] = ()
    """KEY=VALUE edits of the graph's `credit` block for every RL run (e.g. ``kl.coef=0.02``,
    ``normalization=mean_only``): advantage and loss levers that live in the graph rather than the trainer."""
    frozen_roles: tuple[str, ...] = ()
    """Roles whose trajectories the RL runs leave out of the loss (`trainable: false` in the RL graph copy): with
    one shared policy the role still changes through the others' updates, but nothing pushes it directly."""
    warmup_variety: float = 0.0
    """`matpo-graph sft --variety` of every warm-up: how often the expert departs from its canonical action."""

    rl_seed: int | None = None
    """Seed of the RL runs' question order and sampling (None: `seed`). Warm-up and evaluation seeds stay `seed`,
    so two folders differing only here are two RL seeds from one warm-up, paired sample by sample."""
    heldout_split: str = "dev"
    """Embedded-web split the held-out questions come from: dev (for choosing settings) or test (for the final
    measurement, on questions no choice was made on)."""
    heldout_max_hops: int = 2
    """Longest relation chain among the held-out questions (1-4); the first `eval_questions` of them are used."""

    FIXED = ("eval_questions", "samples", "questions_per_step", "seed", "warmup_tokens", "warmup_demos",
             "warmup_drills", "tree_tokens", "tree_seconds", "lr", "temperature", "train_settings", "credit_settings",
             "frozen_roles", "warmup_variety", "rl_seed", "heldout_split", "heldout_max_hops")
    START = ("eval_questions", "samples", "seed", "warmup_tokens", "warmup_demos", "warmup_drills", "tree_tokens",
             "tree_seconds", "warmup_variety", "heldout_split", "heldout_max_hops")
    """What the warm-up and the step-0 evaluation depend on: folders agreeing here may share them."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.eval_every < 1 or self.eval_questions < 1 or self.samples < 1:
            raise ValueError("steps, eval_every, eval_questions and samples must be >= 1")
        if self.heldout_split not in ("dev", "test"):
            raise ValueError(f"heldout_split must be dev or test, not {self.heldout_split!r}")
        if not 1 <= self.heldout_max_hops <= 4:
            raise ValueError(f"heldout_max_hops must be 1-4, not {self.heldout_max_hops}")

    @property
    def train_seed(self) -> int:
        return self.seed if self.rl_seed is None else self.rl_seed

    @property
    def custom_heldout(self) -> bool:
        """Held-out questions other than the trainer's own (dev, 1-2 hops): they go to `eval` as a file."""
        return (self.heldout_split, self.heldout_max_hops) != ("dev", 2)

    def heldout_questions(self, env_seed: int = 0, env_entities: int = 400) -> list[Any]:
        """The held-out questions, in the world's order, as every evaluation of the folder sees them."""
        from matpo_graph.env.questions import within_hops
        from matpo_graph.env.world import build_world

        pool = build_world(env_seed, n_entities=env_entities).questions[self.heldout_split]
        short = within_hops(pool, self.heldout_max_hops)
        if len(short) < self.eval_questions:
            raise ValueError(f"the {self.heldout_split} split has {len(short)} questions of at most "
                             f"{self.heldout_max_hops} hops, fewer than eval_questions={self.eval_questions}")
        return short[: self.eval_questions]

    def eval_steps(self) -> list[int]:
        """Evaluation points: the warm-up model (0), every `eval_every` steps, and the last step."""
        points = list(range(0, self.steps + 1, self.eval_every))
        return points if points[-1] == self.steps else [*points, self.steps]

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def differing(self, saved: dict[str, Any], keys: Sequence[str]) -> list[tuple[str, Any]]:
        """(key, saved value) of each of `keys` whose saved value differs from this one; a folder from before a
        setting existed used its default, and JSON keeps a tuple as a list."""
        defaults = {f.name: f.default for f in fields(self)}

        def comparable(value: Any) -> Any:
            return list(value) if isinstance(value, tuple) else value

        return [(k, saved.get(k, defaults[k])) for k in keys
                if comparable(saved.get(k, defaults[k])) != comparable(getattr(self, k))]

    def check_against(self, saved: dict[str, Any]) -> None:
        """Raise SettingsMismatch when a fixed setting differs from the one the folder was started with."""
        diff = [f"{k}: folder {was!r}, now {getattr(self, k)!r}" for k, was in self.differing(saved, self.FIXED)]
        if diff:
            raise SettingsMismatch("this output folder was started with other settings (" + "; ".join(diff) +
                                   "); finished pieces would not be comparable. Use the same settings or a new --out.")


def edit_credit(credit: Any, edits: Sequence[str]) -> Any:
    """`credit` (a CreditSpec) with KEY=VALUE edits applied, dotted keys reaching nested blocks (``kl.coef=0.02``);
    values are read as YAML scalars. Every edit is checked against the spec, so a typo fails before hours of RL.

    Raises:
        ValueError: an edit that is not KEY=VALUE, names no credit setting, or gives a value the spec refuses.
    """
    import yaml
    from pydantic import ValidationError

    data = credit.model_dump()
    for edit in edits:
        key, sep, raw = edit.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"credit setting {edit!r}: expected KEY=VALUE, e.g. kl.coef=0.02")
        node = data
        *parents, leaf = key.strip().split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                raise ValueError(f"credit setting {edit!r}: credit has no block {part!r}")
            node = node[part]
        if leaf not in node:
            raise ValueError(f"credit setting {edit!r}: no setting {leaf!r} there (known: {', '.join(sorted(node))})")
        node[leaf] = yaml.safe_load(raw)
    try:
        return type(credit).model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"credit settings {', '.join(edits)}: {exc}") from exc


def share_start(layout: "BenchLayout", source: "BenchLayout", settings: BenchSettings,
                configs: Sequence["BenchConfig"]) -> list[str]:
    """Link `source`'s warm-ups and copy its step-0 evaluations into `layout` where this folder has none, so that
    another RL seed or update starts from the very same model and is paired against the very same evaluation.

    Raises:
        SettingsMismatch: the source folder's warm-up or held-out settings differ from these.
    """
    diff = [k for k, _ in settings.differing(json.loads(source.settings_file.read_text()), settings.START)]
    if diff:
        raise SettingsMismatch(f"{source.root} was warmed up or evaluated under other settings ({', '.join(diff)})")
    shared: list[str] = []
    for variant in dict.fromkeys(c.variant for c in configs):
        mine, theirs = layout.warmup(variant), source.warmup(variant)
        if not mine.exists() and (theirs / "model" / "config.json").is_file():
            mine.parent.mkdir(parents=True, exist_ok=True)
            mine.symlink_to(theirs.resolve(), target_is_directory=True)
            shared.append(f"warm-up {variant}")
    for c in configs:
        mine, theirs = layout.eval_file(c.name, 0), source.eval_file(c.name, 0)
        if not mine.exists() and theirs.is_file():
            mine.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(theirs, mine)
            trees = source.eval_trees(c.name, 0)
            if trees.is_file():
                shutil.copyfile(trees, layout.eval_trees(c.name, 0))
            shared.append(f"step-0 evaluation {c.name}")
    return shared


@dataclass(frozen=True)
class BenchLayout:
    """Paths under the output folder."""

    root: Path

    @property
    def settings_file(self) -> Path:
        return self.root / "bench.json"

    @property
    def log_file(self) -> Path:
        return self.root / "log.jsonl"

    @property
    def heldout_file(self) -> Path:
        return self.root / "heldout.jsonl"

    def graph(self, variant: str) -> Path:
        return self.root / "graphs" / f"{variant}.yaml"

    def rl_graph(self, variant: str) -> Path:
        return self.root / "graphs" / f"{variant}.rl.yaml"

    def warmup(self, variant: str) -> Path:
        return self.root / "warmup" / variant

    def run(self, config: str) -> Path:
        return self.root / "runs" / config

    def eval_file(self, config: str, step: int) -> Path:
        return self.run(config) / "evals" / f"step_{step:06d}.json"

    def eval_trees(self, config: str, step: int) -> Path:
        return self.run(config) / "evals" / f"step_{step:06d}.trees.jsonl.gz"


@dataclass
class EvalPoint:
    """One evaluation of one configuration at one step: per-question accuracies and a few tree statistics."""

    config: str
    step: int
    questions: list[str]
    greedy: dict[str, float]
    """question -> accuracy of the greedy answer (0 or 1 with exact match)."""
    sampled: dict[str, float]
    """question -> mean accuracy of its `samples` sampled answers."""
    samples: int
    seconds: float = 0.0
    trees: int = 0
    truncated: int = 0
    answered: float = 0.0
    tool_error_rate: float = 0.0
    max_context: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def summarise_eval(trees: Iterable[RolloutTree], *, config: str, step: int, samples: int, seconds: float) -> EvalPoint:
    """Per-question accuracies of an evaluation's scored trees (greedy trees are tagged ``eg``, sampled ``es``).

    Raises:
        ValueError: a tree without a reward, or a question without its greedy answer or its samples.
    """
    greedy: dict[str, float] = {}
    sampled: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    all_trees = list(trees)
    tool_calls = tool_errors = max_ctx = 0
    for t in all_trees:
        if t.reward is None:
            raise ValueError(f"tree {t.tree_id!r} has no reward")
        qid = str(t.metadata.get("question_id") or t.group_id)
        if qid not in order:
            order.append(qid)
        if t.tree_id.startswith("eg"):
            greedy[qid] = float(t.reward.accuracy)
        else:
            sampled[qid].append(float(t.reward.accuracy))
        for traj in t.trajectories:
            max_ctx = max(max_ctx, len(traj.token_ids))
            for c in traj.calls:
                if c.kind == "tool" and c.valid:
                    tool_calls += 1
                    tool_errors += bool(c.error)
    short = [q for q in order if q not in greedy or len(sampled.get(q, ())) != samples]
    if short:
        raise ValueError(f"evaluation of {config} at step {step}: questions without a greedy answer or {samples} "
                         f"samples: {', '.join(short[:5])}")
    return EvalPoint(
        config=config, step=step, questions=order, greedy=greedy,
        sampled={q: statistics.fmean(v) for q, v in sampled.items()}, samples=samples, seconds=seconds,
        trees=len(all_trees), truncated=sum(1 for t in all_trees if t.truncated is not None),
        answered=statistics.fmean(1.0 if t.reward and t.reward.answer is not None else 0.0 for t in all_trees),
        tool_error_rate=tool_errors / tool_calls if tool_calls else 0.0, max_context=max_ctx,
    )


def write_eval_point(path: Path, point: EvalPoint) -> None:
    """Write atomically (temporary file, then rename): the file's presence means the evaluation finished."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(point), indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def read_eval_point(path: Path) -> EvalPoint | None:
    """The evaluation stored at `path`; None when it is missing or unreadable (then it is redone)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return EvalPoint(**data)
    except (OSError, ValueError, TypeError):
        return None


def gzip_file(src: Path, dst: Path) -> None:
    """Compress `src` to `dst` and remove `src` (evaluation trees: about a tenth of the size)."""
    with open(src, "rb") as fin, gzip.open(dst, "wb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)
    src.unlink()


def trained_step(run_dir: Path) -> int:
    """The step of a run's latest complete checkpoint (0 without one), as `--resume` will see it."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return 0
    steps = [int(p.name.removeprefix("step_")) for p in root.iterdir()
             if p.name.startswith("step_") and p.name[5:].isdigit() and (p / "state.json").is_file()]
    return max(steps, default=0)


def has_checkpoint(run_dir: Path, step: int) -> bool:
    return (run_dir / "checkpoints" / f"step_{step:06d}" / "model.safetensors").is_file()


def warmup_summary(folder: Path) -> dict[str, Any] | None:
    """The finished warm-up's summary row (trained tokens, demonstrations, seconds); None if it did not finish."""
    path = folder / "metrics_sft.jsonl"
    if not (folder / "model" / "config.json").is_file() or not path.is_file():
        return None
    for line in reversed(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("kind") == "summary" and row.get("checkpoint"):
            return row
    return None


@dataclass
class ConfigState:
    """What is done for one configuration, read from its files."""

    config: str
    warmed_up: bool
    trained: int
    evals: dict[int, EvalPoint]
    missing_evals: list[int]
    lost_evals: list[int]
    """Evaluation points not done whose checkpoint is gone (training went past them): they stay missing."""

    @property
    def finished(self) -> bool:
        return self.warmed_up and not self.missing_evals


def config_state(layout: BenchLayout, settings: BenchSettings, config: BenchConfig) -> ConfigState:
    """Read what one configuration has finished. An evaluation counts only when it holds the benchmark's
    number of questions and samples (a file from other settings is not reused)."""
    run = layout.run(config.name)
    trained = trained_step(run)
    evals: dict[int, EvalPoint] = {}
    missing: list[int] = []
    lost: list[int] = []
    for step in settings.eval_steps():
        point = read_eval_point(layout.eval_file(config.name, step))
        if point is not None and point.samples == settings.samples and len(point.questions) == settings.eval_questions:
            evals[step] = point
            continue
        missing.append(step)
        if 0 < step < trained and not has_checkpoint(run, step):
            lost.append(step)
    return ConfigState(config.name, warmup_summary(layout.warmup(config.variant)) is not None, trained, evals,
                       missing, lost)


def append_log(layout: BenchLayout, record: dict[str, Any]) -> None:
    """One finished piece of work (warmup / train / eval) with its wall seconds, for the time estimates."""
    layout.root.mkdir(parents=True, exist_ok=True)
    with layout.log_file.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")


def read_log(layout: BenchLayout) -> list[dict[str, Any]]:
    if not layout.log_file.is_file():
        return []
    out = []
    for line in layout.log_file.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def select_configs(names: Sequence[str] | None) -> list[BenchConfig]:
    """Configurations by name (`all` for every one); the default set when `names` is empty.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if not names:
        return [CONFIGS[n] for n in DEFAULT_CONFIGS]
    if list(names) == ["all"]:
        return list(CONFIGS.values())
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)} (or all)")
    return [CONFIGS[n] for n in names]


@dataclass(frozen=True)
class Action:
    """One piece of work: warm up a variant, train a configuration up to a step, or evaluate it at a step."""

    kind: str  # "warmup" | "train" | "eval"
    variant: str
    config: str | None = None
    step: int = 0

    def describe(self) -> str:
        if self.kind == "warmup":
            return f"warm-up of {self.variant}"
        return f"{'train' if self.kind == 'train' else 'evaluate'} {self.config} {'to' if self.kind == 'train' else 'at'} step {self.step}"


def plan_actions(settings: BenchSettings, configs: Sequence[BenchConfig], states: dict[str, ConfigState]) -> list[Action]:
    """The work left, in the order it will run: every warm-up first, then round by round (every configuration
    to step K and its evaluation, then to 2K, ...), so that an interrupted benchmark leaves all configurations
    at about the same point. Finished pieces never reappear; training always continues from the latest checkpoint.
    """
    actions: list[Action] = []
    for variant in dict.fromkeys(c.variant for c in configs):
        if not all(states[c.name].warmed_up for c in configs if c.variant == variant):
            actions.append(Action("warmup", variant))
    trained = {c.name: states[c.name].trained for c in configs}
    for step in settings.eval_steps():
        for c in configs:
            st = states[c.name]
            if step not in st.missing_evals or step in st.lost_evals:
                continue
            if step > trained[c.name]:
                actions.append(Action("train", c.variant, c.name, step))
                trained[c.name] = step
            actions.append(Action("eval", c.variant, c.name, step))
    return actions
