"""Time the rollout browser on a large step: build 1,000 synthetic trees, write the page, load it in
headless chromium, and open a few trees. Prints the numbers; asserts nothing.

    python scripts/bench_show.py [--trees 1000] [--group-size 4] [--out /tmp/bench_show.html]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from matpo_graph.core.rollout import CallRecord, ChatMessage, RewardBreakdown, RolloutTree, Trajectory, Turn, write_trees

_WORDS = ("river capital bridge archive census museum harbour treaty valley dynasty railway festival "
          "glacier parliament observatory canal monastery lighthouse").split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


def _trajectory(rng: random.Random, traj_id: str, parent: str | None, role: str, depth: int, n_turns: int,
                children: list[str]) -> Trajectory:
    msgs = [ChatMessage(role="system", content=_text(rng, 120)), ChatMessage(role="user", content=_text(rng, 40))]
    ids: list[int] = []
    mask: list[int] = []
    prompt = 220
    ids += [rng.randrange(50000) for _ in range(prompt)]
    mask += [0] * prompt
    turns = []
    kids = list(children)
    for k in range(n_turns):
        n = rng.randint(40, 200)
        text = _text(rng, n // 2)
        msgs.append(ChatMessage(role="assistant", content=text, trained=True, kind="generated"))
        ids += [rng.randrange(50000) for _ in range(n)]
        mask += [1] * n
        calls = []
        if k < n_turns - 1:
            if kids and rng.random() < 0.7:
                child = kids.pop(0)
                calls.append(CallRecord(name="search_and_browse", kind="child", arguments={"subtask": _text(rng, 12)},
                                        result=_text(rng, 60), child_id=child, seconds=rng.random() * 5))
            else:
                ok = rng.random() > 0.1
                calls.append(CallRecord(name="web_search" if ok else "serch", kind="tool" if ok else "invalid", valid=ok,
                                        arguments={"query": _text(rng, 5)}, result=_text(rng, 250),
                                        error=None if ok else "unknown tool", seconds=rng.random()))
            for c in calls:
                msgs.append(ChatMessage(role="tool", content=c.result, kind="tool_result"))
                r = len(c.result) // 4
                ids += [rng.randrange(50000) for _ in range(r)]
                mask += [0] * r
        turns.append(Turn(index=k, text=text, num_tokens=n, calls=calls))
    return Trajectory(traj_id=traj_id, parent_id=parent, role=role, depth=depth, token_ids=ids, loss_mask=mask,
                      logprobs=[-1.0 if m else 0.0 for m in mask], prompt_length=prompt, messages=msgs, turns=turns,
                      termination="answer" if depth == 0 else "summary", final_text=_text(rng, 20),
                      advantage=0.0, format_score=rng.random())


def synthetic_trees(n_trees: int, group_size: int, seed: int = 0) -> list[RolloutTree]:
    """Trees of a planner with 1-3 browser children, rewards drawn at random, GRPO advantages broadcast."""
    rng = random.Random(seed)
    trees = []
    for g in range(0, n_trees, group_size):
        members = []
        for i in range(min(group_size, n_trees - g)):
            n_kids = rng.randint(1, 3)
            kid_ids = [f"0.{k}" for k in range(n_kids)]
            trajs = [_trajectory(rng, "0", None, "planner", 0, n_kids + 2, kid_ids)]
            trajs += [_trajectory(rng, kid, "0", "browser", 1, rng.randint(2, 4), []) for kid in kid_ids]
            reward = rng.choice([0.0, 0.1, 0.9, 1.0])
            members.append(RolloutTree(tree_id=f"q{g // group_size}-{i}", group_id=f"q{g // group_size}",
                                       question=_text(rng, 25), answers=[_text(rng, 2)], trajectories=trajs,
                                       reward=RewardBreakdown(total=reward, accuracy=float(reward > 0.5), format=0.5)))
        r = [m.reward.total for m in members]
        mean = sum(r) / len(r)
        std = (sum((x - mean) ** 2 for x in r) / max(len(r) - 1, 1)) ** 0.5
        for m in members:
            a = (m.reward.total - mean) / (std + 1e-6)
            trees.append(m.model_copy(update={"trajectories": [t.model_copy(update={"advantage": a}) for t in m.trajectories]}))
    return trees


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=1000)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--open", type=int, default=10, help="trees to open one after another")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--screenshot", type=Path, default=None, help="save a PNG of the page after opening the trees")
    args = ap.parse_args()

    from matpo_graph.viz.chromium import Chromium
    from matpo_graph.viz.show_data import collect_show_data
    from matpo_graph.viz.show_page import write_show_page

    work = Path(tempfile.mkdtemp(prefix="bench-show-"))
    t0 = time.perf_counter()
    trees = synthetic_trees(args.trees, args.group_size)
    jsonl = work / "step_000001.jsonl"
    write_trees(jsonl, trees)
    t1 = time.perf_counter()
    data = collect_show_data(jsonl)
    out = write_show_page(data, args.out or work / "show.html")
    t2 = time.perf_counter()
    n_traj = sum(len(t.trajectories) for t in trees)
    print(f"trees {len(trees)}  trajectories {n_traj}  jsonl {jsonl.stat().st_size / 1e6:.1f} MB  "
          f"page {out.stat().st_size / 1e6:.1f} MB")
    print(f"generate {t1 - t0:.2f} s  build page (read + pack + write) {t2 - t1:.2f} s")

    with Chromium() as browser:
        load = browser.open(out, timeout_s=120)
        ready = browser.wait_for("document.body && document.body.dataset.ready === '1'", timeout_s=120)
        js_ms = browser.eval("window.__matpoShow.parseAndRenderMs")
        nav = browser.eval("JSON.stringify(performance.getEntriesByType('navigation')[0].toJSON())")
        rows = browser.eval("document.querySelectorAll('tr.tree-row').length")
        print(f"chromium: navigate→load {load:.2f} s (+{ready:.2f} s to ready); summary parse+render {js_ms:.0f} ms; "
              f"{rows} tree rows")
        import json

        n = json.loads(nav)
        print(f"navigation timing: domInteractive {n['domInteractive']:.0f} ms  domContentLoaded "
              f"{n['domContentLoadedEventEnd']:.0f} ms  load {n['loadEventEnd']:.0f} ms")
        ids = [t.tree_id for t in trees[:: max(1, len(trees) // max(args.open, 1))][: args.open]]
        times = []
        for tid in ids:
            ms = browser.eval(f"(function(){{var t=performance.now(); window.__matpoShow.openTree({json.dumps(tid)}); "
                              f"document.body.offsetHeight; return performance.now()-t;}})()")
            times.append(ms)
        print(f"open a tree (parse its JSON + render + layout): mean {sum(times) / len(times):.1f} ms, "
              f"max {max(times):.1f} ms over {len(times)} trees")
        errors = browser.eval("document.getElementById('errors').textContent")
        print(f"console errors: {len(browser.console_errors)}  page errors: {errors!r}  "
              f"requests: {sorted(set(browser.requests))[:3]}")
        if args.screenshot:
            browser.screenshot(args.screenshot, full_page=False)
    print(f"page: {out}")


if __name__ == "__main__":
    main()
