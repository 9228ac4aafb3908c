"""The MATPO agent loop for veRL's V1 trainer.

One ``run`` is one root rollout of a question (veRL starts ``rollout.n`` of them per question: the
GRPO group). It runs the SAME :class:`~matpo_graph.runtime.executor.Executor` as the local trainer,
with the graph's own tools (built from the compiled program, not from veRL's tool config) and the
policy adapter over veRL's vLLM servers, scores the tree with the graph's reward, and returns one
``AgentLoopOutput`` per trajectory, descendants first and the root last (see
:mod:`matpo_graph.verl_target.convert`).

The compiled bundle is found through the ``matpo.bundle_dir`` key that the launch script adds to
veRL's config; the program, credit plan and embedded-web settings are read from it once per process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from matpo_graph.compilers.verl import AGENT_NAME, CONFIG_KEY, TARGET_FILE
from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.reward import score_tree, with_reward
from matpo_graph.core.rollout import RewardBreakdown, RolloutTree
from matpo_graph.verl_target.convert import tree_outputs
from matpo_graph.verl_target.policy import ServerManagerPolicy

__all__ = ["BundleRuntime", "MatpoAgentLoop", "load_bundle"]


@dataclass
class BundleRuntime:
    """What every run of one process shares: the compiled graph and the embedded web, if any."""

    bundle_dir: Path
    program: Program
    plan: CreditPlan
    target: dict[str, Any]
    embedded_url: str | None = None


_BUNDLES: dict[str, BundleRuntime] = {}
_WEBS: dict[tuple[int, str | None], Any] = {}
_LOCK = threading.Lock()


def _embedded_url(seed: int, noise: str | None) -> str:
    """Start (once per process) the embedded web the training questions come from."""
    with _LOCK:
        handle = _WEBS.get((seed, noise))
        if handle is None:
            from matpo_graph.env.server import serve_in_thread

            handle = _WEBS[(seed, noise)] = serve_in_thread(seed=seed, port=0, noise=noise)
        return handle.url


def load_bundle(bundle_dir: str | Path) -> BundleRuntime:
    """The bundle's program, plan and target settings, cached per process.

    Raises:
        FileNotFoundError: the folder is not a compiled verl bundle.
    """
    key = str(Path(bundle_dir).resolve())
    cached = _BUNDLES.get(key)
    if cached is not None:
        return cached
    root = Path(key)
    missing = [f for f in ("program.json", "credit_plan.json", TARGET_FILE) if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{root} is not a verl bundle (missing {', '.join(missing)}); run `matpo-graph compile GRAPH --target verl -o DIR`")
    program = Program.model_validate_json((root / "program.json").read_text(encoding="utf-8"))
    plan = CreditPlan.model_validate_json((root / "credit_plan.json").read_text(encoding="utf-8"))
    target = json.loads((root / TARGET_FILE).read_text(encoding="utf-8"))
    runtime = BundleRuntime(root, program, plan, target)
    if program.uses_embedded_web():
        web = target.get("embedded_web") or {}
        runtime.embedded_url = _embedded_url(int(web.get("seed", 0)), web.get("noise"))
    _BUNDLES[key] = runtime
    return runtime


# Per-process caches of objects that are costly to build: the chat tokenizer (probes the template)
# and the tools (HTTP clients belong to the event loop they were opened in).
_CHATS: dict[int, Any] = {}
_TOOLS: dict[tuple[str, int], Any] = {}


def _chat_tokenizer(tokenizer: Any) -> Any:
    from matpo_graph.runtime.chat import ChatTokenizer

    chat = _CHATS.get(id(tokenizer))
    if chat is None:
        chat = _CHATS[id(tokenizer)] = ChatTokenizer(tokenizer)
    return chat


def _tools(runtime: BundleRuntime) -> Any:
    from matpo_graph.tools.registry import build_tools

    key = (str(runtime.bundle_dir), id(asyncio.get_running_loop()))
    tools = _TOOLS.get(key)
    if tools is None:
        tools = _TOOLS[key] = build_tools(runtime.program.tools, embedded_url=runtime.embedded_url)
    return tools


def _question(kwargs: dict[str, Any]) -> tuple[str, list[str], dict[str, Any]]:
    extra = kwargs.get("extra_info") or {}
    question = extra.get("question")
    if not question:
        users = [m for m in (kwargs.get("raw_prompt") or []) if m.get("role") == "user"]
        question = users[-1]["content"] if users else ""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the data row has no question (extra_info.question or a user message in prompt)")
    answers = extra.get("answers")
    if answers is None:
        answers = (kwargs.get("reward_model") or {}).get("ground_truth") or []
    if isinstance(answers, str):
        answers = [answers]
    answers = [str(a) for a in (answers.tolist() if hasattr(answers, "tolist") else answers)]
    return question, answers, dict(extra)


@register(AGENT_NAME)
class MatpoAgentLoop(AgentLoopBase):
    """Runs the compiled graph for one root rollout; see the module docstring."""

    def __init__(self, *args: Any, bundle_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        block = self.config.get(CONFIG_KEY) or {}
        where = bundle_dir or block.get("bundle_dir")
        if not where:
            raise ValueError(
                f"the MATPO agent loop needs `{CONFIG_KEY}.bundle_dir` in veRL's config; "
                "launch with the script that `matpo-graph compile GRAPH --target verl` writes"
            )
        self.runtime = load_bundle(where)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        from matpo_graph.runtime.executor import Executor

        runtime = self.runtime
        question, answers, extra = _question(kwargs)
        uid = str(kwargs.get("uid", uuid4().hex))
        session = kwargs.get("session_id", 0)
        request_kwargs = {"priority": int(kwargs["priority"])} if "priority" in kwargs else {}
        policy = ServerManagerPolicy(self.server_manager, sampling_params, session=uuid4().hex, request_kwargs=request_kwargs)
        executor = Executor(runtime.program, policy, _chat_tokenizer(self.tokenizer), _tools(runtime))
        tree = await executor.run(
            question,
            tree_id=f"{uid}/{session}",
            group_id=uid,
            answers=answers,
            seed=self._seed(uid, session),
            metadata={"question_id": str(extra.get("id", "")), "engine": "verl"},
        )
        breakdown = await self._score(tree)
        tree = with_reward(tree, breakdown)
        return tree_outputs(
            tree,
            breakdown,
            prompt_length=self.prompt_length,
            response_length=self.response_length,
            trained_roles=runtime.plan.trained_roles,
            stats=policy.stats,
        )

    def _seed(self, uid: str, session: Any) -> int | None:
        """Per-rollout sampling seed when veRL's ``rollout.full_determinism`` is on (else None)."""
        if not self.rollout_config.get("full_determinism", False):
            return None
        text = f"{self.rollout_config.get('seed', 0)}|{uid}|{session}"
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") & 0x7FFFFFFF

    async def _score(self, tree: RolloutTree) -> RewardBreakdown:
        plan = self.runtime.plan
        if plan.accuracy_scorer == "judge" and plan.judge:
            from matpo_graph.judge import score_trees_judged

            return (await score_trees_judged([tree], plan))[0]
        return score_tree(tree, plan)
