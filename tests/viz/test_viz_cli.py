"""`matpo-graph viz` and `matpo-graph show` from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from viz_helpers import GRAPHS, KNOWN, make_run_dir, rich_graph

from matpo_graph.cli import main
from matpo_graph.viz.graph_render import GRAPH_FORMATS

GRAPH_FILES = sorted(GRAPHS.glob("*.yaml")) + sorted(GRAPHS.glob("*.yml"))


@pytest.mark.skipif(not GRAPH_FILES, reason="graphs/ holds no graph files yet")
@pytest.mark.parametrize("graph", GRAPH_FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("suffix", GRAPH_FORMATS)
def test_viz_draws_every_shipped_graph(graph: Path, suffix: str, tmp_path, capsys):
    out = tmp_path / f"{graph.stem}{suffix}"
    assert main(["viz", str(graph), "-o", str(out)]) == 0
    assert out.stat().st_size > 200
    roots = yaml.safe_load(graph.read_text())["root"]
    if suffix != ".png":
        assert roots in out.read_text()
    assert str(out) in capsys.readouterr().out


def test_viz_compiled_folder(tmp_path):
    graph = tmp_path / "rich.yaml"
    graph.write_text(yaml.safe_dump(rich_graph()))
    assert main(["compile", str(graph), "-o", str(tmp_path / "compiled")]) == 0
    out = tmp_path / "rich.svg"
    assert main(["viz", str(tmp_path / "compiled"), "-o", str(out)]) == 0
    text = out.read_text()
    assert "search_and_browse ×4" in text and "replan ×1" in text


def test_viz_invalid_graph_reports_and_exits_1(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    data = rich_graph()
    data["roles"]["planner"]["max_turns"] = "many"
    bad.write_text(yaml.safe_dump(data))
    assert main(["viz", str(bad), "-o", str(tmp_path / "x.svg")]) == 1  # invalid graph, as validate
    err = capsys.readouterr().err
    assert "max_turns" in err and "bad.yaml" in err
    assert not (tmp_path / "x.svg").exists()


def test_viz_refuses_an_unknown_output_format(tmp_path, capsys):
    assert main(["viz", str(tmp_path / "g.yaml"), "-o", str(tmp_path / "g.pdf")]) == 2
    assert ".html, .svg, .png, .mmd" in capsys.readouterr().err


def test_viz_missing_graph_exits_2(tmp_path, capsys):
    assert main(["viz", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "g.svg")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_show_jsonl_writes_one_page(tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["show", str(KNOWN), "-o", str(out)]) == 0
    assert "6 trees in 2 groups" in capsys.readouterr().out
    assert out.read_text().count('type="application/json"') == 1 + 6


def test_show_run_dir_defaults_to_the_latest_step(tmp_path):
    run = make_run_dir(tmp_path, KNOWN)
    assert main(["show", str(run)]) == 0
    assert (run / "show_step_000002.html").exists()
    assert main(["show", str(run), "--step", "1", "-o", str(tmp_path / "s1.html")]) == 0
    assert (tmp_path / "s1.html").exists()


def test_show_unknown_step_lists_the_steps(tmp_path, capsys):
    run = make_run_dir(tmp_path, KNOWN)
    assert main(["show", str(run), "--step", "7", "-o", str(tmp_path / "x.html")]) == 2
    assert "no rollouts for step 7; steps with rollouts: 1, 2" in capsys.readouterr().err


def test_show_step_with_a_file_is_refused(tmp_path, capsys):
    assert main(["show", str(KNOWN), "--step", "1", "-o", str(tmp_path / "x.html")]) == 2
    assert "--step selects a step of a run folder" in capsys.readouterr().err


def test_show_empty_run_dir_exits_2(tmp_path, capsys):
    assert main(["show", str(tmp_path), "-o", str(tmp_path / "x.html")]) == 2
    assert "no rollouts/step_XXXXXX.jsonl files" in capsys.readouterr().err


def test_show_bad_rollout_file_names_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(KNOWN.read_text().splitlines()[0] + "\n{\"tree_id\": 1}\n")
    assert main(["show", str(bad), "-o", str(tmp_path / "x.html")]) == 2
    assert "bad.jsonl:2: not a rollout tree" in capsys.readouterr().err


def test_show_graph_option_computes_missing_advantages(tmp_path, capsys):
    from matpo_graph.core.rollout import read_trees, write_trees

    bare = [t.model_copy(update={"trajectories": [tr.model_copy(update={"advantage": None}) for tr in t.trajectories]})
            for t in read_trees(KNOWN)]
    write_trees(tmp_path / "bare.jsonl", bare)
    graph = tmp_path / "rich.yaml"
    graph.write_text(yaml.safe_dump(rich_graph()))
    assert main(["show", str(tmp_path / "bare.jsonl"), "--graph", str(graph), "-o", str(tmp_path / "p.html")]) == 0
    assert "advantages computed when this page was built (broadcast/std)" in capsys.readouterr().out
    assert main(["show", str(tmp_path / "bare.jsonl"), "--graph", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "q.html")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
