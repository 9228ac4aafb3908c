"""The rollout page in headless chromium: trees, advantages, masks, nesting, escaping, no script errors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from viz_helpers import KNOWN, make_run_dir, requires_chromium

from matpo_graph.cli import main
from matpo_graph.core.rollout import read_trees, write_trees
from matpo_graph.viz.chromium import Chromium, dump_dom

pytestmark = [pytest.mark.browser, requires_chromium]

TREES = {t.tree_id: t for t in read_trees(KNOWN)}
HOSTILE = TREES["hostile-0"].root.final_text


@pytest.fixture(scope="module")
def known_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("page") / "known.html"
    assert main(["show", str(KNOWN), "-o", str(out)]) == 0
    return out


def _load(browser: Chromium, page: Path) -> None:
    browser.open(page)
    browser.wait_for("document.body && document.body.dataset.ready === '1'")


def _assert_clean(browser: Chromium) -> None:
    assert browser.eval("document.getElementById('errors').textContent") == ""
    assert browser.console_errors == []
    assert browser.requests and all(u.startswith(("file:", "data:")) for u in browser.requests), browser.requests


def _open(browser: Chromium, tree_id: str) -> None:
    assert browser.eval(f"window.__matpoShow.openTree({json.dumps(tree_id)})") is True


def _trajs(browser: Chromium) -> dict[str, dict]:
    return {
        t["id"]: t
        for t in browser.eval(
            """Array.from(document.querySelectorAll('.traj')).map(n => ({id: n.dataset.trajId, adv: n.dataset.adv,
                trained: Number(n.dataset.trained), tokens: Number(n.dataset.tokens), open: n.classList.contains('open'),
                rendered: !!n.querySelector(':scope > .traj-body').firstChild,
                call: (n.parentElement.closest('.call') || {dataset: {}}).dataset.call || null,
                parent: (n.parentElement.closest('.traj') || {dataset: {}}).dataset.trajId || null}))"""
        )
    }


def test_show_lists_every_tree_with_reward_and_advantage(browser, known_page):
    _load(browser, known_page)
    rows = browser.eval(
        """Array.from(document.querySelectorAll('tr.tree-row')).map(r => ({id: r.dataset.treeId,
            adv: r.querySelector('td.adv').dataset.adv, reward: r.querySelector('td.reward').textContent}))"""
    )
    assert [r["id"] for r in rows] == list(TREES)
    for r in rows:
        tree = TREES[r["id"]]
        assert float(r["adv"]) == pytest.approx(tree.root.advantage, abs=1e-12)
        assert r["reward"] == f"{tree.reward.total:.3f}"
    assert browser.eval("document.querySelectorAll('section.group').length") == 2
    assert browser.eval("document.querySelectorAll('.traj').length") == 0  # bodies wait until a tree is opened
    _assert_clean(browser)


def test_show_open_tree_nests_children_at_their_calls(browser, known_page, screenshots):
    _load(browser, known_page)
    _open(browser, "veloria-0")
    trajs = _trajs(browser)
    assert set(trajs) == {"0", "0.0", "0.0.0"}
    assert (trajs["0.0"]["parent"], trajs["0.0"]["call"]) == ("0", "search_and_browse")
    assert (trajs["0.0.0"]["parent"], trajs["0.0.0"]["call"]) == ("0.0", "verify_fact")
    for traj in TREES["veloria-0"].trajectories:
        shown = trajs[traj.traj_id]
        assert float(shown["adv"]) == pytest.approx(traj.advantage, abs=1e-12)
        assert (shown["trained"], shown["tokens"]) == (sum(traj.loss_mask), len(traj.token_ids))
    # default: depth <= 1 open; the depth-2 verifier is closed and not rendered yet
    assert trajs["0"]["open"] and trajs["0.0"]["open"]
    assert not trajs["0.0.0"]["open"] and not trajs["0.0.0"]["rendered"]
    bad = browser.eval("""Array.from(document.querySelectorAll('.call.invalid')).map(c => c.textContent)""")
    assert len(bad) == 1 and "unknown tool 'serch' for role planner" in bad[0]
    failed = browser.eval("""Array.from(document.querySelectorAll('.call.failed')).map(c => c.dataset.call + ': ' +
        c.querySelector('.errtext').textContent)""")
    assert failed == ["scrape: HTTP 404"]
    browser.screenshot(screenshots / "show_veloria_0.png")
    _assert_clean(browser)


def test_show_mask_strip_matches_the_loss_mask(browser, known_page):
    _load(browser, known_page)
    _open(browser, "veloria-0")
    runs = browser.eval("""Array.from(document.querySelectorAll('.traj[data-traj-id="0"] > .traj-body > .mask-wrap .mask span'))
        .map(s => [s.className, parseFloat(s.style.width)])""")
    mask = TREES["veloria-0"].root.loss_mask
    expanded = []
    for cls, width in runs:
        expanded += [1 if cls == "m1" else 0] * round(width * len(mask) / 100)
    assert expanded == mask
    turns = browser.eval("""Array.from(document.querySelectorAll('.traj[data-traj-id="0"] > .traj-body > .turn > .textblock'))
        .map(t => t.dataset.trained)""")
    assert turns == ["1", "1"]


def test_show_context_marks_trained_messages(browser, known_page):
    _load(browser, known_page)
    _open(browser, "veloria-0")
    browser.eval("""document.querySelector('.traj[data-traj-id="0"] > .traj-body > details.msgs').open = true""")
    browser.wait_for("""document.querySelectorAll('.traj[data-traj-id="0"] > .traj-body > details.msgs .msg').length > 0""")
    flags = browser.eval("""Array.from(document.querySelectorAll('.traj[data-traj-id="0"] > .traj-body > details.msgs .msg'))
        .map(m => [m.dataset.trained, m.classList.contains('trained')])""")
    want = [m.trained for m in TREES["veloria-0"].root.messages]
    assert [f[0] == "1" for f in flags] == want and [f[1] for f in flags] == want
    assert sum(want) == 2


def test_show_depth_and_role_controls_open_and_close_trajectories(browser, known_page):
    _load(browser, known_page)
    _open(browser, "veloria-0")
    browser.eval("var s = document.getElementById('open-depth'); s.value = '2'; s.dispatchEvent(new Event('change'))")
    trajs = _trajs(browser)
    assert trajs["0.0.0"]["open"] and trajs["0.0.0"]["rendered"]
    turn = browser.eval("""document.querySelector('.traj[data-traj-id="0.0.0"] .turn .textblock').dataset.trained""")
    assert turn == "0"  # the frozen verifier's text is not trained
    browser.eval("""var c = document.querySelector('#open-roles input[value="browser"]'); c.checked = false;
        c.dispatchEvent(new Event('change'))""")
    trajs = _trajs(browser)
    assert trajs["0"]["open"] and not trajs["0.0"]["open"]
    _assert_clean(browser)


def test_show_hostile_model_text_stays_text(browser, known_page, screenshots):
    _load(browser, known_page)
    _open(browser, "hostile-0")
    _open(browser, "hostile-1")
    assert browser.eval("typeof window.__pwned") == "undefined"
    assert browser.eval("document.querySelectorAll('#groups img, #groups script, #groups [onerror]').length") == 0
    assert browser.eval("Array.from(document.querySelectorAll('#groups b')).filter(b => b.textContent === 'bold').length") == 0
    finals = browser.eval("Array.from(document.querySelectorAll('pre.final-text')).map(p => p.textContent)")
    assert HOSTILE in finals
    assert browser.eval("""document.querySelector('section[data-group-id="hostile"] .question').textContent""") == (
        "What does <script>alert(1)</script> print?")
    assert "policy failed: server returned 503" in browser.eval("document.getElementById('groups').textContent")
    browser.screenshot(screenshots / "show_hostile.png")
    _assert_clean(browser)


def test_show_filter_hides_non_matching_groups_and_trees(browser, known_page):
    _load(browser, known_page)
    browser.eval("var f = document.getElementById('filter'); f.value = 'HOSTILE'; f.dispatchEvent(new Event('input'))")
    hidden = browser.eval("Array.from(document.querySelectorAll('section.group')).map(s => [s.dataset.groupId, s.hidden])")
    assert hidden == [["veloria", True], ["hostile", False]]
    browser.eval("var f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input'));"
                 "var c = document.getElementById('only-flagged'); c.checked = true; c.dispatchEvent(new Event('change'))")
    shown = browser.eval("Array.from(document.querySelectorAll('tr.tree-row')).filter(r => !r.hidden).map(r => r.dataset.treeId)")
    assert shown == ["veloria-0"]


def test_show_run_folder_page_embeds_plots_and_step_metrics(browser, tmp_path, screenshots):
    run = make_run_dir(tmp_path, KNOWN)
    out = tmp_path / "run.html"
    assert main(["show", str(run), "-o", str(out)]) == 0
    _load(browser, out)
    browser.eval("document.querySelectorAll('details.panel').forEach(d => d.open = true)")
    browser.wait_for("document.querySelector('#plots img').complete")
    img = browser.eval("var i = document.querySelector('#plots img'); [i.src.slice(0, 22), i.naturalWidth]")
    assert img[0] == "data:image/png;base64," and img[1] > 0
    metrics = browser.eval("Array.from(document.querySelectorAll('table.metrics tr')).map(r => r.textContent)")
    assert "reward_mean0.65000" in metrics and "step2" in metrics
    assert browser.eval("document.querySelector('h1').textContent") == "Rollouts · step 2"
    browser.screenshot(screenshots / "show_run_dir.png", full_page=False)
    _assert_clean(browser)


def test_show_missing_advantages_read_na(browser, tmp_path):
    bare = [t.model_copy(update={"trajectories": [tr.model_copy(update={"advantage": None}) for tr in t.trajectories]})
            for t in TREES.values()]
    write_trees(tmp_path / "bare.jsonl", bare)
    assert main(["show", str(tmp_path / "bare.jsonl"), "-o", str(tmp_path / "bare.html")]) == 0
    _load(browser, tmp_path / "bare.html")
    advs = browser.eval("Array.from(document.querySelectorAll('td.adv')).map(td => [td.dataset.adv, td.textContent])")
    assert advs == [["n/a", "n/a"]] * len(TREES)
    assert browser.eval("document.getElementById('credit-status').dataset.status") == "missing"
    _open(browser, "veloria-0")
    assert {t["adv"] for t in _trajs(browser).values()} == {"n/a"}
    _assert_clean(browser)


def test_show_error_sink_catches_script_errors(browser, known_page):
    """The checks above would notice a script error: a thrown error reaches #errors and the console log."""
    _load(browser, known_page)
    browser.eval("setTimeout(function () { throw new Error('deliberate boom'); }, 0)")
    browser.wait_for("document.getElementById('errors').textContent.length > 0")
    assert "deliberate boom" in browser.eval("document.getElementById('errors').textContent")
    browser.wait_for("true")
    assert any("deliberate boom" in e for e in browser.console_errors)


def test_show_dump_dom_after_scripts_ran(known_page):
    dom = dump_dom(known_page, budget_ms=3000)
    assert 'data-ready="1"' in dom
    assert dom.count('class="tree-row"') == len(TREES)
    assert 'id="errors" hidden=""' in dom


def test_show_screenshot_is_a_real_picture(browser, known_page, screenshots):
    _load(browser, known_page)
    _open(browser, "veloria-3")
    shot = browser.screenshot(screenshots / "show_overview.png", full_page=False)
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1400, 1000)
    assert shot.stat().st_size > 20_000  # text and bars, not a blank page
