"""An expert demonstrator: a Policy that plays every role of a graph by peeking at the question's decomposition.

It answers each ``generate`` call from the executor's :data:`GENERATION_CONTEXT` (role, task, messages so
far) and the :class:`~matpo_graph.data.qa.QAItem` of the question, so its demonstrations are ordinary
rollout trees made by the real executor with the real tools. A delegating role hands the sub-questions
to its child in dependency order (earlier answers substituted in), one wave of independent lookups per
turn, and re-asks once when a report lacks the fact; a browsing role searches with the lookup, scrapes
the hit the lookup names and quotes the line stating the gold answer (it may peek; it is a
demonstrator), trying the next hit or a second search when a page lacks it. The root writes the answer
in the graph's format; children close with a short report.

With ``variety > 0`` the expert varies where a real policy would: the wording of its sentences, the first
query (the lookup as asked, or its names only), which plausible hit it reads first (a page without the fact
is followed by the next one) and the order of independent lookups in one turn. A warm-up on one fixed way of
acting leaves the policy almost deterministic, and RL then draws the same tree for every sample of a
question; varied demonstrations leave choices to explore. The draws are seeded by the tree, trajectory and
turn, so a demonstration is reproducible.

Demonstrations carry **no sampling logprobs**: every generated token has logprob 0.0. They are meant
for supervised warm-up only, never for a policy-gradient loss that divides by sampling probabilities.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from matpo_graph.coldstart.expert_plan import ExpertUnsupported, RoleStrategy, plan_expert
from matpo_graph.core.program import Program
from matpo_graph.core.reward import normalize_answer
from matpo_graph.core.toolcalls import format_tool_call, parse_tool_calls
from matpo_graph.data.qa import QAItem
from matpo_graph.runtime.gen_context import GENERATION_CONTEXT, GenerationContext
from matpo_graph.runtime.policy import Generation, PolicyError, SamplingParams

__all__ = ["ExpertPolicy", "ExpertUnsupported", "Step", "steps_of"]

_REF = re.compile(r"#(\d+)")
_HIT = re.compile(r"^\[(\d+)\]\s*(.*?)\s*\nURL:\s*(\S+)", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_MAX_ASKS = 2  # a lookup is delegated (or searched) at most twice before the expert gives up on it

# Wordings of the expert's sentences; the first of each is the canonical one (variety 0).
_SEARCH = ("Let me search.", "I will look this up.", "A search should find this.", "Searching for it.")
_SEARCH_AGAIN = ("Let me search again with other words.", "Another search, with the names only.",
                 "I will try a shorter query.")
_READ = ('Result "{title}" looks right; I will read it.', 'I will open "{title}".', '"{title}" should say it; reading it.',
         'Reading "{title}".')
_READ_NEXT = ('That page did not say. I will read "{title}" instead.', 'Not on that page; trying "{title}".',
              'No luck there. Next: "{title}".')
_FOUND = ('The page says: "{sentence}" So the answer is {answer}.', 'Found it: "{sentence}" The answer is {answer}.',
          'The page states "{sentence}", so it is {answer}.')
_HAND_OFF = ("I will hand this lookup to a helper.", "A helper can look this up.", "I will ask a helper for this.")
_ASK_AGAIN = ("The report did not give the fact, so I ask again.", "No fact in that report; asking again.",
              "The helper did not find it; one more try.")
_HELPER_FOUND = ("The helper found: {answer}.", "The helper reports {answer}.", "Got it: {answer}.")


@dataclass(frozen=True)
class Step:
    """One lookup of a question's decomposition, with earlier answers already substituted."""

    index: int  # 1-based, as '#k' references count
    question: str
    answer: str
    deps: tuple[int, ...] = ()
    support: str | None = None  # path of the page that states the answer, when the data says
    raw: str = ""  # the lookup as the decomposition writes it ('#k' kept), for the planner's stated plan
    field: str | None = None  # the infobox row label that states the answer, when the data says


def steps_of(item: QAItem) -> list[Step]:
    """The lookups of `item`: its decomposition with '#k' resolved, or the question itself as one step.

    A one-step decomposition is the question itself: it is looked up as asked (copying is easier to
    learn than rephrasing).
    """
    if not item.decomposition or len(item.decomposition) == 1:
        step = (item.decomposition or [{}])[0]
        support = step.get("support_page") or step.get("evidence_url")
        answer = str(step.get("answer", item.answers[0]))
        return [Step(1, item.question, answer, (), str(support) if support else None, item.question, _field(step))]
    answers = {i: str(s["answer"]) for i, s in enumerate(item.decomposition, 1)}
    steps = []
    for i, s in enumerate(item.decomposition, 1):
        raw = str(s["question"])
        deps = {int(k) for k in _REF.findall(raw) if 0 < int(k) < i}
        deps |= {int(d) + 1 for d in s.get("depends_on") or [] if isinstance(d, int) and 0 <= d < i - 1}
        text = str(s.get("question_resolved") or _REF.sub(lambda m: answers.get(int(m.group(1)), m.group(0)), raw))
        support = s.get("support_page") or s.get("evidence_url")
        steps.append(Step(i, text, answers[i], tuple(sorted(deps)), str(support) if support else None, raw, _field(s)))
    return steps


def _field(step: dict[str, Any]) -> str | None:
    """The row label a decomposition step names (embedded-web data does), else None."""
    label = str(step.get("field") or "").strip()
    return label or None


def _norm(text: str) -> str:
    return f" {normalize_answer(text)} "


def _holds(text: str, answer: str) -> bool:
    """Whether `text` states `answer` (normalised, whole words)."""
    gold = normalize_answer(answer)
    return bool(gold) and f" {gold} " in _norm(text)


def _sentence_with(text: str, answer: str, subject: str, field: str | None = None) -> str | None:
    """The line of `text` that states `answer`, as the demonstration quotes it.

    A table row whose value is exactly the answer ('Employer | Rook Press') is preferred, quoted as the
    page writes it: its label names the relation in one word, which a small model maps to the question
    far more easily than it picks one of many prose sentences about the same subject, and an exact
    quote is a copy. The row labelled `field` wins when the data names it. Otherwise the sentence
    stating the answer that names most of the lookup's subject.
    """
    gold = normalize_answer(answer)
    words = set(normalize_answer(_keywords(subject)).split())
    best: tuple[int, int, str] | None = None
    rows = []
    for line in text.splitlines():
        label, sep, value = line.partition("|")
        if sep and label.strip() and normalize_answer(value) == gold:
            rows.append((" ".join(label.split()), " ".join(value.split())))
    if rows:
        label, value = next((r for r in rows if field and r[0].lower() == field.lower()), rows[0])
        return f"{label} | {value}"
    for sentence in _SENTENCE.split(text):
        sentence = " ".join(sentence.replace("|", ":").split()).strip(" -")
        if sentence and _holds(sentence, answer):
            score = (len(words & set(normalize_answer(sentence).split())), -len(sentence))
            if best is None or score > best[:2]:
                best = (*score, sentence)
    return best[2] if best else None


def _hits(result: str) -> list[tuple[str, str]]:
    """(title, url) of each numbered search result in a tool result text."""
    return [(m.group(2), m.group(3)) for m in _HIT.finditer(result)]


@dataclass
class _Turn:
    text: str
    results: list[str]


def _history(messages: Sequence[tuple[str, str]], n_prompt: int) -> list[_Turn]:
    """This trajectory's own turns: each generated text and the messages injected after it (call results)."""
    turns: list[_Turn] = []
    for speaker, content in messages[n_prompt:]:
        if speaker == "assistant":
            turns.append(_Turn(content, []))
        elif turns:
            turns[-1].results.append(content)
    return turns


class ExpertPolicy:
    """A :class:`~matpo_graph.runtime.policy.Policy` that demonstrates the graph on questions it knows.

    Args:
        program: the compiled graph; checked up front (:class:`ExpertUnsupported` if it cannot be played).
        tokenizer: the model's :class:`~matpo_graph.runtime.chat.ChatTokenizer` (or anything with
            ``encode(text) -> ids`` and ``eos_token_ids``); the text is tokenised with it and closed
            with the end-of-turn token, as a sampled reply would be.
        items: the questions it may be asked, with their decompositions.
        variety: how often each choice departs from the canonical one (0: always the same tree).
        seed: seeds the varied choices (with the tree, trajectory and turn).
    """

    def __init__(self, program: Program, tokenizer: Any, items: Iterable[QAItem], *, variety: float = 0.0,
                 seed: int = 0) -> None:
        if not 0.0 <= variety <= 1.0:
            raise ValueError(f"variety must be in [0, 1], got {variety}")
        self.variety = variety
        self.seed = seed
        self.program = program
        self.strategies: dict[str, RoleStrategy] = plan_expert(program)
        self.tok = tokenizer
        eos = sorted(getattr(tokenizer, "eos_token_ids", ()) or ())
        if not eos:
            raise ValueError("the tokenizer has no end-of-turn token; the expert needs one to close its replies")
        self.eos_id = eos[0]
        self.by_id: dict[str, QAItem] = {}
        self.by_question: dict[str, QAItem] = {}
        self.add_items(items)
        fmt = program.tool_call_format
        self.fmt = fmt
        self._n_prompt = {name: 2 + sum(len(ex) for ex in role.examples) for name, role in program.roles.items()}

    def add_items(self, items: Iterable[QAItem]) -> None:
        for item in items:
            self.by_id[item.id] = item
            self.by_question[item.question.strip()] = item

    # -- the Policy protocol -------------------------------------------------------------------------

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        ctx = GENERATION_CONTEXT.get()
        if ctx is None:
            raise PolicyError("the expert policy needs the executor's generation context (run it through Executor)")
        text = self.reply(ctx)
        ids = list(self.tok.encode(text))
        finish = "stop"
        if len(ids) + 1 > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        else:
            ids.append(self.eos_id)
        return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish, text=text)

    # -- deciding the reply --------------------------------------------------------------------------

    def item_for(self, ctx: GenerationContext) -> QAItem:
        qa_id = ctx.metadata.get("qa_id") if isinstance(ctx.metadata, dict) else None
        item = self.by_id.get(str(qa_id)) if qa_id is not None else None
        item = item or self.by_question.get(ctx.question.strip())
        if item is None:
            raise PolicyError(f"the expert does not know the question {ctx.question[:80]!r}")
        return item

    def reply(self, ctx: GenerationContext) -> str:
        """The text of the next turn of `ctx`'s trajectory."""
        strategy = self.strategies.get(ctx.role)
        if strategy is None:
            raise PolicyError(f"the expert has no strategy for role {ctx.role!r}")
        item = self.item_for(ctx)
        steps = steps_of(item)
        if ctx.depth > 0:  # a child settles the one lookup it was given, already resolved
            steps = [replace(self._assigned(ctx, steps), deps=())]
        turns = _history(ctx.messages, self._n_prompt.get(ctx.role, 2))
        draw = _Draw(self.variety, f"{self.seed}|{ctx.tree_id}|{ctx.traj_id}|{len(turns)}|{ctx.purpose}")
        if strategy.kind == "delegate":
            return self._delegate(ctx, strategy, steps, turns, item, draw)
        return self._browse(ctx, strategy, steps, turns, item, draw)

    def _assigned(self, ctx: GenerationContext, steps: list[Step]) -> Step:
        parent = self._parent_strategy(ctx.role)
        arg = parent.child_arg if parent and parent.child_arg else "subtask"
        task = str(ctx.task.get(arg, "")).strip()
        for step in steps:
            if normalize_answer(step.question) == normalize_answer(task):
                return step
        raise PolicyError(f"role {ctx.role!r} got a lookup that is not part of the question: {task[:80]!r}")

    def _parent_strategy(self, role: str) -> RoleStrategy | None:
        return next((s for s in self.strategies.values() if s.child_role == role), None)

    # -- delegating roles ----------------------------------------------------------------------------

    def _delegate(self, ctx: GenerationContext, s: RoleStrategy, steps: list[Step], turns: list[_Turn], item: QAItem,
                  draw: _Draw) -> str:
        by_question = {normalize_answer(st.question): st for st in steps}
        asked: dict[int, int] = {}
        done: dict[int, str] = {}
        fresh: list[Step] = []  # settled by the results of the latest turn
        for n, turn in enumerate(turns):
            for call, result in zip(parse_tool_calls(turn.text, self.fmt), turn.results):
                step = by_question.get(normalize_answer(str((call.arguments or {}).get(s.child_arg or "", ""))))
                if call.name != s.child or step is None:
                    continue
                asked[step.index] = asked.get(step.index, 0) + 1
                if step.index not in done and _holds(result, step.answer):
                    done[step.index] = step.answer
                    if n == len(turns) - 1:
                        fresh.append(step)
        note = " ".join(draw.pick(_HELPER_FOUND).format(answer=st.answer) for st in fresh)
        if ctx.purpose != "act" or len(done) == len(steps):
            return self._finish(ctx, steps, done, item, note)
        ready = [st for st in steps if st.index not in done and all(d in done for d in st.deps)
                 and asked.get(st.index, 0) < _MAX_ASKS]
        if not ready:
            return self._finish(ctx, steps, done, item, note)
        retry = any(asked.get(st.index, 0) for st in ready)
        if retry:
            lead = draw.pick(_ASK_AGAIN)
        elif turns:
            lead = f"Next: lookup{'s' if len(ready) > 1 else ''} {', '.join(str(st.index) for st in ready)} of {len(steps)}."
        elif ctx.depth == 0:
            lead = _plan_text(steps)
        else:
            lead = draw.pick(_HAND_OFF)
        order = draw.shuffled(ready)  # independent lookups: any order is right
        calls = "\n".join(format_tool_call(s.child or "", {s.child_arg or "subtask": st.question}, self.fmt) for st in order)
        return f"{note} {lead}".strip() + "\n" + calls

    # -- browsing roles ------------------------------------------------------------------------------

    def _browse(self, ctx: GenerationContext, s: RoleStrategy, steps: list[Step], turns: list[_Turn], item: QAItem,
                draw: _Draw) -> str:
        pos = 0  # steps settled so far
        searches = 0  # searches for the current step
        hits: list[tuple[str, str]] = []
        scraped: set[str] = set()
        found: dict[int, tuple[str, str]] = {}  # step index -> (sentence, url)
        fresh: Step | None = None
        for n, turn in enumerate(turns):
            for call, result in zip(parse_tool_calls(turn.text, self.fmt), turn.results):
                if pos >= len(steps):
                    break
                args = call.arguments or {}
                if call.name == s.search:
                    searches += 1
                    hits = _hits(result)
                elif call.name == s.scrape:
                    url = str(args.get(s.scrape_arg or "url", ""))
                    scraped.add(url)
                    step = steps[pos]
                    sentence = _sentence_with(result, step.answer, step.question, step.field) if _holds(result, step.answer) else None
                    if sentence is not None:
                        found[step.index] = (sentence, url)
                        fresh = step if n == len(turns) - 1 else None
                        pos, searches, hits, scraped = pos + 1, 0, [], set()
        answered = {st.index: st.answer for st in steps if st.index in found}
        note = ""
        if fresh is not None:
            sentence, _ = found[fresh.index]
            note = draw.pick(_FOUND).format(sentence=sentence, answer=fresh.answer)
        if ctx.purpose != "act" or pos >= len(steps):
            return self._finish(ctx, steps, answered, item, note, found)
        step = steps[pos]
        candidates = [h for h in self._rank(hits, step) if h[1] not in scraped]
        if hits and candidates:
            # a detour: now and then the first read is the runner-up among the hits the lookup names (or the
            # top hit when none is named), and a page without the fact is followed by the next candidate
            detour = not scraped and len(candidates) > 1 and draw.depart(0.5)
            title, url = candidates[1] if detour else candidates[0]
            lead = (draw.pick(_READ) if not scraped else draw.pick(_READ_NEXT)).format(title=title)
            return f"{note} {lead}".strip() + "\n" + format_tool_call(s.scrape or "", {s.scrape_arg or "url": url}, self.fmt)
        if searches >= _MAX_ASKS:
            return self._finish(ctx, steps, answered, item, note, found)
        first_query = _keywords(step.question) if draw.depart(0.5) else step.question
        query = first_query if searches == 0 else _other_query(step.question, first_query=_first_query(turns, s, self.fmt))
        lead = draw.pick(_SEARCH) if searches == 0 else draw.pick(_SEARCH_AGAIN)
        if len(steps) > 1 and searches == 0:
            lead = f"Now: {step.question}" if pos else f"First: {step.question}"
        if step.field and searches == 0:
            lead = f"{lead} Field to find: {step.field}." if len(steps) > 1 else f"Field to find: {step.field}. {lead}"
        return f"{note} {lead}".strip() + "\n" + format_tool_call(s.search or "", {s.search_arg or "query": query}, self.fmt)

    @staticmethod
    def _rank(hits: list[tuple[str, str]], step: Step) -> list[tuple[str, str]]:
        """Hits whose title the lookup names come first (the longest such title wins), then search order.

        The known supporting page only breaks ties among equally named titles: the choice a student can
        learn is "the page named in the lookup", not a peek.
        """
        q = _norm(step.question)

        def key(pair: tuple[int, tuple[str, str]]) -> tuple[int, int, int, int]:
            i, (title, url) = pair
            named = bool(normalize_answer(title)) and _norm(title) in q
            supported = bool(step.support) and url.rstrip("/").endswith(str(step.support).rstrip("/"))
            return (0 if named else 1, -len(title) if named else 0, 0 if supported else 1, i)

        return [h for _, h in sorted(enumerate(hits), key=key)]

    # -- closing -------------------------------------------------------------------------------------

    def _finish(self, ctx: GenerationContext, steps: list[Step], done: dict[int, str], item: QAItem, note: str,
                found: dict[int, tuple[str, str]] | None = None) -> str:
        complete = len(done) == len(steps)
        if ctx.depth == 0:
            if not complete:
                return f"{note} I could not find all the facts.\n{self._answer('unknown')}".strip()
            done_text = "That was the only lookup." if len(steps) == 1 else f"All {len(steps)} lookups are done."
            return f"{note} {done_text}\n{self._answer(item.answers[0])}".strip()
        step = steps[0]
        if ctx.purpose == "act":  # the turn that ends the work; a report follows when the graph asks for one
            if not complete:
                return f"{note} I could not find this fact.".strip()
            return note or f"The answer is {step.answer}."
        if not complete:
            return f"I could not find the answer to: {step.question}"
        source = (found or {}).get(step.index)
        if source is None:
            return f"Answer: {step.answer}."
        sentence, url = source
        return f"Source: {url} says \"{sentence}\"\nAnswer: {step.answer}."

    def _answer(self, answer: str) -> str:
        return f"\\boxed{{{answer}}}" if self.program.answer_format == "boxed" else f"<answer>{answer}</answer>"


def _plan_text(steps: Sequence[Step]) -> str:
    """The root's first words: the row labels it needs (when known), how many lookups, then the list.

    Naming the labels first, innermost relation first ("Fields to find: Country, then Capital."), turns
    the question's structure into a few word-for-word choices a small model learns like any mapping
    (each relation phrase has its label), instead of one bare structural guess; the count then only
    counts what was just named. The count is stated up front in words that differ from the first token
    on ("This needs one lookup." against "This needs 2 lookups:"), so every later turn can read whether
    a lookup is left from its own opening instead of re-deciding it; a small model otherwise keeps
    delegating after a one-lookup question is already answered.
    """
    fields = [st.field for st in steps]
    lead = f"Fields to find: {', then '.join(fields)}. " if all(fields) else ""  # type: ignore[arg-type]
    if len(steps) == 1:
        return f"{lead}This needs one lookup."
    return f"{lead}This needs {len(steps)} lookups:\n" + "\n".join(f"{st.index}. {st.raw or st.question}" for st in steps)


def _keywords(question: str) -> str:
    """A second query: the capitalised names of the lookup (or its content words)."""
    names = re.findall(r"\b[A-Z][\w'-]*(?:\s+(?:of|the|de|van|von)?\s*[A-Z][\w'-]*)*", question)
    names = [n for n in names if n.split()[0] not in {"Who", "What", "Which", "Where", "When", "In", "How"}]
    return " ".join(names) or question


class _Draw:
    """The expert's seeded choices for one reply; with variety 0 every choice is the canonical one."""

    def __init__(self, variety: float, key: str) -> None:
        self.variety = variety
        self.rng = random.Random(key) if variety > 0 else None

    def depart(self, share: float = 1.0) -> bool:
        """Whether this choice departs from the canonical one (probability variety x share)."""
        return self.rng is not None and self.rng.random() < self.variety * share

    def pick(self, options: Sequence[str]) -> str:
        """The canonical wording, or with probability `variety` one of the others."""
        if self.rng is None or len(options) < 2 or not self.depart():
            return options[0]
        return self.rng.choice(options[1:])

    def shuffled(self, items: Sequence[Any]) -> list[Any]:
        out = list(items)
        if self.rng is not None and len(out) > 1 and self.depart():
            self.rng.shuffle(out)
        return out


def _first_query(turns: Sequence[_Turn], s: RoleStrategy, fmt: str) -> str | None:
    """The query of this trajectory's latest search (the one a second search rewords)."""
    for turn in reversed(turns):
        for call in parse_tool_calls(turn.text, fmt):
            if call.name == s.search:
                return str((call.arguments or {}).get(s.search_arg or "query", ""))
    return None


def _other_query(question: str, *, first_query: str | None) -> str:
    """A second query that differs from the first: the names only, or the lookup as asked when the names went first."""
    names = _keywords(question)
    return question if first_query is not None and normalize_answer(first_query) == normalize_answer(names) != normalize_answer(question) else names
