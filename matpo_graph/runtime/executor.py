"""The recursive async executor: one shared policy plays every role of a compiled graph.

A call along an edge starts a nested rollout of the child role in its own, isolated context; calls of
one turn run concurrently (``asyncio.gather``), capped per edge (``max_parallel``) and per tree
(``program.max_concurrency``). A child holds its tree-wide slot only while it works, not while it waits
for its own calls, so nested delegation cannot deadlock on the cap. Everything that goes wrong in a
rollout (a malformed or undeclared call, bad arguments, a call beyond ``max_depth``, a failing tool or
policy) is recorded in the tree and the rollout goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

from matpo_graph.core.program import CallableView, Program, RoleProgram
from matpo_graph.core.rollout import CallRecord, ChatMessage, RolloutTree, Termination, Trajectory, Turn
from matpo_graph.core.templates import render
from matpo_graph.core.toolcalls import (
    ParsedCall,
    answer_instructions,
    format_tool_result,
    parse_tool_calls,
    strip_for_parent,
    tool_instructions,
)
from matpo_graph.runtime.calls import CallCheck, RoleValidators, call_tool, check_call, clip_result, request_seed
from matpo_graph.runtime.chat import ChatTokenizer
from matpo_graph.runtime.context import ContextBuilder
from matpo_graph.runtime.gen_context import GENERATION_CONTEXT, GenerationContext
from matpo_graph.runtime.policy import Generation, Policy, SamplingParams
from matpo_graph.tools.base import Tool

__all__ = ["Executor", "RolloutSetupError"]


class RolloutSetupError(ValueError):
    """The program cannot run as configured (missing tool, template that does not render for the root)."""


@dataclass
class _Traj:
    traj_id: str
    parent_id: str | None
    role: str
    depth: int
    task: dict[str, Any]
    ctx: ContextBuilder | None = None
    turns: list[Turn] = field(default_factory=list)
    termination: Termination = "answer"
    final_text: str = ""
    error: str | None = None
    started: float = 0.0
    seconds: float = 0.0
    children: int = 0


@dataclass
class _Tree:
    tree_id: str
    group_id: str
    question: str
    seed: int | None
    metadata: dict[str, Any]
    slots: asyncio.Semaphore
    t0: float = field(default_factory=time.perf_counter)
    trajs: list[_Traj] = field(default_factory=list)


class Executor:
    """Runs rollouts of one compiled program; safe to use for many concurrent trees.

    Args:
        program: the compiled graph.
        policy: the shared policy (every role).
        tokenizer: the policy's tokenizer and chat template.
        tools: tool implementations by name; every tool a role may call must be present.
        sampling: base sampling parameters (a role's ``temperature`` and ``max_tokens_per_turn`` override them).
        max_concurrency: cap on in-flight policy requests across all trees (None: no cap).
        tool_role: chat role of injected results: ``"user"`` (works with any template) or ``"tool"``.
    """

    def __init__(
        self,
        program: Program,
        policy: Policy,
        tokenizer: ChatTokenizer,
        tools: Mapping[str, Tool],
        *,
        sampling: SamplingParams | None = None,
        max_concurrency: int | None = None,
        tool_role: Literal["user", "tool"] = "user",
    ) -> None:
        self.program = program
        self.policy = policy
        self.chat = tokenizer
        self.tools = dict(tools)
        self.sampling = sampling or SamplingParams()
        self.tool_role = tool_role
        # native: the model's template renders tools and results, and its dialect reads the calls
        self.native = program.tool_call_format == "native"
        self.dialect = tokenizer.native_dialect() if self.native else program.tool_call_format
        if self.native:
            self.tool_role = "tool"
        self._max_generations = max_concurrency
        self._gen_slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        missing = sorted(
            {c.target for r in program.roles.values() for c in r.callables if c.kind == "tool"} - set(self.tools)
        )
        if missing:
            raise RolloutSetupError(
                f"no implementation for tool(s) {', '.join(map(repr, missing))}; build them with matpo_graph.tools.registry.build_tools"
            )
        self._validators = {name: RoleValidators(role) for name, role in program.roles.items()}

    # -- public API ----------------------------------------------------------------------------------

    async def run(
        self,
        question: str,
        *,
        tree_id: str = "0",
        group_id: str | None = None,
        answers: Sequence[str] = (),
        seed: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RolloutTree:
        """One root rollout of `question` and all the rollouts it delegates to."""
        tree = _Tree(
            tree_id,
            group_id or tree_id,
            question,
            seed,
            dict(metadata or {}),
            asyncio.Semaphore(self.program.max_concurrency),
        )
        await self._run_role(
            tree, self.program.root, depth=0, task={}, parent=None, result_chars=None, holds_slot=False
        )
        trajectories = [self._finish(t) for t in tree.trajs]
        meta = {
            "template_hashes": self.program.template_hashes(),
            "graph_sha256": self.program.graph_sha256,
            "seed": seed,
        }
        return RolloutTree(
            tree_id=tree_id,
            group_id=tree.group_id,
            question=question,
            answers=list(answers),
            graph=self.program.graph_name,
            trajectories=trajectories,
            seconds=time.perf_counter() - tree.t0,
            metadata={**meta, **tree.metadata},
        )

    async def run_group(
        self,
        question: str,
        n: int,
        *,
        group_id: str,
        answers: Sequence[str] = (),
        seed: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[RolloutTree]:
        """`n` concurrent root rollouts of one question (a GRPO group), in order; tree ids ``<group_id>/<i>``."""
        if n < 1:
            raise ValueError(f"group size must be >= 1, got {n}")
        return list(
            await asyncio.gather(
                *(
                    self.run(
                        question,
                        tree_id=f"{group_id}/{i}",
                        group_id=group_id,
                        answers=answers,
                        seed=None if seed is None else seed + i,
                        metadata=metadata,
                    )
                    for i in range(n)
                )
            )
        )

    # -- one trajectory ------------------------------------------------------------------------------

    def _variables(
        self, tree: _Tree, role: RoleProgram, depth: int, task: dict[str, Any], parent_role: str | None
    ) -> dict[str, Any]:
        tools = [
            {"name": c.name, "description": c.description, "parameters": c.parameters, "kind": c.kind}
            for c in role.callables
        ]
        subtask = task.get("subtask") if isinstance(task.get("subtask"), str) else ""
        if depth > 0 and not subtask:
            subtask = "\n".join(f"{k}: {v}" for k, v in task.items())
        return {
            "role": role.name,
            "depth": depth,
            "max_turns": role.max_turns,
            "tools": tools,
            "tool_names": [t["name"] for t in tools],
            "tool_format": self.program.tool_call_format,
            "tool_instructions": tool_instructions(self.program.tool_call_format, tools),
            "answer_format": self.program.answer_format,
            "answer_instructions": answer_instructions(self.program.answer_format, is_root=depth == 0),
            "question": tree.question,
            "root_query": tree.question,
            "subtask": subtask,
            "args": dict(task),
            "parent_role": parent_role,
        }

    def _chat_for(self, role: RoleProgram) -> ChatTokenizer:
        """The tokenizer a role's contexts render with: with native calling, the template gets the role's tools."""
        if not self.native:
            return self.chat
        return self.chat.with_tools([
            {"type": "function", "function": {"name": c.name, "description": c.description, "parameters": c.parameters}}
            for c in role.callables
        ])

    async def _initial_messages(self, role: RoleProgram, variables: dict[str, Any]) -> list[ChatMessage]:
        try:
            # off the event loop: a slow template (bounded by the sandbox's limits) stalls no other rollout
            system = await asyncio.to_thread(render, role.system.source, variables)
            user = await asyncio.to_thread(render, role.user.source, variables)
        except Exception as exc:  # jinja errors: undefined variable, sandbox refusal, syntax
            raise RolloutSetupError(
                f"role {role.name!r}: a prompt template does not render: {type(exc).__name__}: {exc}"
            ) from exc
        messages = [ChatMessage(role="system", content=system, kind="prompt")]
        for example in role.examples:
            for m in example:
                speaker = m.get("role", "user")
                chat_role = "assistant" if speaker == "assistant" else (self.tool_role if speaker == "tool" else "user")
                messages.append(ChatMessage(role=chat_role, content=m.get("content", ""), kind="example"))
        messages.append(ChatMessage(role="user", content=user, kind="prompt"))
        return messages

    async def _run_role(
        self,
        tree: _Tree,
        role_name: str,
        *,
        depth: int,
        task: dict[str, Any],
        parent: _Traj | None,
        result_chars: int | None,
        holds_slot: bool,
        traj_id: str = "0",
    ) -> _Traj:
        role = self.program.roles[role_name]
        variables = self._variables(tree, role, depth, task, parent.role if parent else None)
        messages = await self._initial_messages(role, variables)  # raises before the trajectory exists
        t = _Traj(
            traj_id, parent.traj_id if parent else None, role_name, depth, dict(task), started=time.perf_counter()
        )
        tree.trajs.append(t)
        t.ctx = ctx = ContextBuilder(self._chat_for(role), messages)
        limit = self.program.context_tokens - self.program.summary_reserve
        last_text = ""
        for index in range(role.max_turns):
            prompt = ctx.generation_prompt()
            if len(prompt) + role.max_tokens_per_turn > limit:
                t.termination = "context_overflow"
                break
            gen = await self._generate(tree, t, prompt, role, role.max_tokens_per_turn, "act", index)
            if gen is None:
                break
            last_text = ctx.add_generation(gen)
            turn = Turn(index=index, text=last_text, num_tokens=len(gen.token_ids), finish_reason=gen.finish_reason)
            t.turns.append(turn)
            parsed = parse_tool_calls(last_text, self.dialect)
            if not parsed:
                t.termination = "answer"
                break
            turn.calls = await self._run_calls(tree, t, role, parsed, holds_slot)
            ctx.add_messages([self._result_message(c) for c in turn.calls])
        else:
            t.termination = "max_turns"
        if t.termination != "policy_error" and self._needs_summary(role, depth, t.termination):
            last_text = await self._summary_turn(tree, t, role, variables, last_text)
        if len(ctx) > self.program.context_tokens:  # results injected after the last turn that fits
            ctx.fit_for([], self.program.context_tokens)
        t.final_text = (
            last_text if depth == 0 else clip_result(strip_for_parent(last_text), result_chars or len(last_text) or 1)
        )
        t.seconds = time.perf_counter() - t.started
        return t

    @staticmethod
    def _needs_summary(role: RoleProgram, depth: int, termination: Termination) -> bool:
        if role.final_summary == "always":
            return True
        ran_out = termination in ("max_turns", "context_overflow")
        return ran_out and (role.final_summary == "on_overflow" or depth == 0)

    async def _summary_turn(
        self, tree: _Tree, t: _Traj, role: RoleProgram, variables: dict[str, Any], last_text: str
    ) -> str:
        """Ask for the closing summary (children) or final answer (root), dropping the latest messages if needed."""
        assert t.ctx is not None
        ctx = t.ctx
        try:
            text = await asyncio.to_thread(render, role.summary.source, variables)
            instruction = ChatMessage(role="user", content=text, kind="instruction")
        except Exception as exc:  # noqa: BLE001 - a template error ends this trajectory, not the rollout
            t.error = f"summary template does not render: {type(exc).__name__}: {exc}"
            return last_text
        if not ctx.fit_for([instruction], self.program.context_tokens - self.program.summary_reserve):
            t.termination = "context_overflow"
            return last_text
        ctx.add_messages([instruction])
        prompt = ctx.generation_prompt()
        max_tokens = max(1, min(role.max_tokens_per_turn, self.program.context_tokens - len(prompt)))
        forced = t.depth == 0 and t.termination != "answer"
        purpose: Literal["summary", "forced_answer"] = "forced_answer" if forced else "summary"
        gen = await self._generate(tree, t, prompt, role, max_tokens, purpose, len(t.turns))
        if gen is None:
            return last_text
        text = ctx.add_generation(gen)
        t.turns.append(
            Turn(
                index=len(t.turns),
                text=text,
                num_tokens=len(gen.token_ids),
                finish_reason=gen.finish_reason,
                purpose=purpose,
            )
        )
        if t.termination == "answer":
            t.termination = "summary"
        return text

    async def _generate(
        self, tree: _Tree, t: _Traj, prompt: list[int], role: RoleProgram, max_tokens: int, purpose: str, turn: int
    ) -> Generation | None:
        """One policy call; a failure is recorded on the trajectory (termination policy_error), never raised."""
        base = self.sampling
        sampling = base.model_copy(
            update={
                "max_tokens": max_tokens,
                "temperature": role.temperature if role.temperature is not None else base.temperature,
                "seed": request_seed(tree.seed, tree.tree_id, t.traj_id, turn, purpose)
                if tree.seed is not None
                else base.seed,
            }
        )
        assert t.ctx is not None
        info = GenerationContext(
            role=t.role,
            traj_id=t.traj_id,
            depth=t.depth,
            question=tree.question,
            tree_id=tree.tree_id,
            group_id=tree.group_id,
            task=t.task,
            purpose=purpose,
            turn=turn,
            messages=tuple((m.role, m.content) for m in t.ctx.messages),
            metadata=tree.metadata,
        )
        token = GENERATION_CONTEXT.set(info)
        try:
            async with self._generation_slot():
                gen = await self.policy.generate(prompt, sampling)
            if len(gen.token_ids) != len(gen.logprobs) or not gen.token_ids:
                raise ValueError(f"policy returned {len(gen.token_ids)} tokens and {len(gen.logprobs)} logprobs")
            return gen
        except Exception as exc:  # noqa: BLE001 - any backend failure is recorded, the rollout goes on
            t.termination = "policy_error"
            t.error = f"{type(exc).__name__}: {exc}"[:2000]
            return None
        finally:
            GENERATION_CONTEXT.reset(token)

    def _generation_slot(self) -> Any:
        """The cap on in-flight policy requests, bound to the running loop (a semaphore cannot move loops)."""
        if not self._max_generations:
            return nullcontext()
        loop = asyncio.get_running_loop()
        if self._gen_slots is None or self._gen_slots[0] is not loop:
            self._gen_slots = (loop, asyncio.Semaphore(self._max_generations))
        return self._gen_slots[1]

    # -- calls ---------------------------------------------------------------------------------------

    async def _run_calls(
        self, tree: _Tree, t: _Traj, role: RoleProgram, parsed: list[ParsedCall], holds_slot: bool
    ) -> list[CallRecord]:
        edge_slots = {c.name: asyncio.Semaphore(c.max_parallel) for c in role.callables}
        jobs = []
        for p in parsed:
            check = check_call(p, self._validators[role.name])
            child_id = None
            if check.error is None and check.kind == "child" and t.depth + 1 <= self.program.max_depth:
                t.children += 1
                child_id = f"{t.traj_id}.{t.children}"  # assigned in the order the calls were written
            jobs.append(self._one_call(tree, t, p, check, child_id, edge_slots))
        if holds_slot:
            tree.slots.release()  # lend our slot to the calls we wait for
        try:
            return list(await asyncio.gather(*jobs))
        finally:
            if holds_slot:
                await tree.slots.acquire()

    async def _one_call(
        self,
        tree: _Tree,
        t: _Traj,
        parsed: ParsedCall,
        check: CallCheck,
        child_id: str | None,
        edge_slots: dict[str, asyncio.Semaphore],
    ) -> CallRecord:
        start = time.perf_counter()
        rec = CallRecord(
            name=parsed.name,
            arguments=check.arguments,
            raw=parsed.raw,
            kind=check.kind,
            started_s=start - tree.t0,
            valid=check.error is None,
            error=check.error,
        )
        c: CallableView | None = check.callable
        if check.error is not None or c is None:
            rec.result = check.message or "Error: the call was not run."
        elif c.kind == "child" and child_id is None:
            rec.error = f"max_depth {self.program.max_depth} reached"
            rec.result = f"Error: {c.name!r} cannot be used at this depth (the delegation limit is reached). Do this step yourself."
        elif c.kind == "tool":
            async with edge_slots[c.name], tree.slots:
                res = await call_tool(self.tools[c.target], check.arguments or {})
            rec.result = clip_result(res.text, c.max_result_chars)
            rec.error = None if res.ok else (res.error or "tool failed")
        else:
            async with edge_slots[c.name]:
                await tree.slots.acquire()
                try:
                    rec.result, rec.error, rec.child_id = await self._delegate(
                        tree, t, c, check.arguments or {}, child_id or ""
                    )
                finally:
                    tree.slots.release()
        rec.seconds = time.perf_counter() - start
        return rec

    async def _delegate(
        self, tree: _Tree, parent: _Traj, c: CallableView, args: dict[str, Any], child_id: str
    ) -> tuple[str, str | None, str | None]:
        try:
            child = await self._run_role(
                tree,
                c.target,
                depth=parent.depth + 1,
                task=args,
                parent=parent,
                result_chars=c.max_result_chars,
                holds_slot=True,
                traj_id=child_id,
            )
        except RolloutSetupError as exc:
            return f"Error: the helper could not start ({exc}).", str(exc), None
        if child.final_text:
            return child.final_text, child.error, child.traj_id
        why = child.error or child.termination
        return f"Error: the helper returned no report ({why}).", why, child.traj_id

    def _result_message(self, rec: CallRecord) -> ChatMessage:
        kind = (
            "error"
            if not rec.valid or rec.child_id is None and rec.kind == "child"
            else ("child_result" if rec.kind == "child" else "tool_result")
        )
        return ChatMessage(
            role=self.tool_role,
            content=format_tool_result(rec.name or "?", rec.result, self.program.tool_call_format),  # native: as is
            kind=kind,
        )

    # -- output --------------------------------------------------------------------------------------

    @staticmethod
    def _finish(t: _Traj) -> Trajectory:
        ctx = t.ctx
        assert ctx is not None
        return Trajectory(
            traj_id=t.traj_id,
            parent_id=t.parent_id,
            role=t.role,
            depth=t.depth,
            token_ids=list(ctx.token_ids),
            loss_mask=list(ctx.loss_mask),
            logprobs=list(ctx.logprobs),
            prompt_length=ctx.final_prompt_length,
            messages=list(ctx.messages),
            turns=t.turns,
            termination=t.termination,
            final_text=t.final_text,
            task=t.task,
            seconds=t.seconds,
            error=t.error,
        )
