"""`matpo-graph validate | schema | render | compile`: exit codes, messages, generated files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from matpo_graph.cli import main
from matpo_graph.cli.graph_verbs import dsl_reference_markdown, schema_text

REPO = Path(__file__).resolve().parents[2]
GRAPHS = sorted((REPO / "graphs").glob("*.yaml"))
BAD_FILES = sorted((REPO / "tests" / "fixtures" / "bad").glob("*.yaml"))


def test_validate_shipped_graphs_exit_0_subprocess():
    out = subprocess.run(
        [sys.executable, "-m", "matpo_graph", "validate", *[str(p.relative_to(REPO)) for p in GRAPHS]],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert out.stdout.count(": ok (") == len(GRAPHS)


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_validate_bad_fixture_exits_1_with_file_line_and_path(path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(REPO)
    rel = str(path.relative_to(REPO))
    assert main(["validate", rel]) == 1
    err = capsys.readouterr().err
    assert err == path.with_suffix(".txt").read_text(encoding="utf-8")
    first = err.splitlines()[0]
    assert first.startswith(f"{rel}:") and first.split(":")[1].isdigit()


def test_validate_reports_every_file(capsys: pytest.CaptureFixture[str]):
    files = [str(BAD_FILES[0]), str(GRAPHS[0]), str(BAD_FILES[1])]
    assert main(["validate", *files]) == 1
    captured = capsys.readouterr()
    assert BAD_FILES[0].name in captured.err and BAD_FILES[1].name in captured.err
    assert "2 of 3 graph files are invalid" in captured.err
    assert f"{GRAPHS[0]}: ok" in captured.out


def test_validate_quiet_hides_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    graph = tmp_path / "g.yaml"
    graph.write_text("name: g\nroot: a\nroles:\n  a: {system: hi}\ntools:\n  t: {backend: search, description: d}\n")
    assert main(["validate", str(graph)]) == 0
    assert "[unused-tool]" in capsys.readouterr().err
    assert main(["validate", "-q", str(graph)]) == 0
    assert capsys.readouterr() == ("", "")


def test_schema_committed_file_is_up_to_date():
    committed = (REPO / "schema" / "graph.schema.json").read_text(encoding="utf-8")
    assert committed == schema_text(), "regenerate with: matpo-graph schema -o schema/graph.schema.json"


def test_dsl_reference_committed_file_is_up_to_date():
    committed = (REPO / "docs" / "dsl-reference.md").read_text(encoding="utf-8")
    assert committed == dsl_reference_markdown(), "regenerate with: matpo-graph schema --markdown -o docs/dsl-reference.md"


def test_dsl_reference_lists_every_field_and_runtime_variable():
    from matpo_graph.core.program import RUNTIME_VARIABLES
    from matpo_graph.core.spec import Graph, Role

    text = dsl_reference_markdown()
    for model in (Graph, Role):
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in text
    for var in RUNTIME_VARIABLES:
        assert f"| `{var}` |" in text


def test_schema_validates_shipped_graphs():
    import jsonschema
    import yaml

    schema = json.loads(schema_text())
    for path in GRAPHS:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_schema_check_flags_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "schema.json"
    out.write_text("{}\n")
    assert main(["schema", "-o", str(out), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["schema", "-o", str(out)]) == 0
    assert main(["schema", "-o", str(out), "--check"]) == 0


def test_render_prints_system_and_user(capsys: pytest.CaptureFixture[str]):
    code = main(["render", str(REPO / "graphs" / "deep_search.yaml"), "--role", "browser", "--var", "question=Who built the Zeta bridge?"])
    assert code == 0
    out = capsys.readouterr().out
    assert "===== browser: system (prompts/browser.j2) =====" in out
    assert "===== browser: user (prompts/browser_task.j2) =====" in out
    assert "Who built the Zeta bridge?" in out and "<tool_call>" in out


def test_render_unknown_role_exits_1(capsys: pytest.CaptureFixture[str]):
    assert main(["render", str(REPO / "graphs" / "deep_search.yaml"), "--role", "nobody"]) == 2  # a flag naming nothing
    assert "roles: planner, browser" in capsys.readouterr().err


def test_compile_writes_program_plan_drawing_and_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["compile", str(REPO / "graphs" / "deep_search.yaml"), "-o", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["credit_plan.json", "graph.mmd", "graph.yaml", "program.json"]
    assert json.loads((tmp_path / "out" / "program.json").read_text())["root"] == "planner"


def test_compile_invalid_graph_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["compile", str(BAD_FILES[0]), "-o", str(tmp_path / "out")]) == 1
    assert BAD_FILES[0].name in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_compile_verl_target_missing_module_is_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setitem(sys.modules, "matpo_graph.compilers.verl", None)
    assert main(["compile", str(REPO / "graphs" / "deep_search.yaml"), "-o", str(tmp_path), "--target", "verl"]) == 2  # a missing extra
    assert "verl target is not available" in capsys.readouterr().err


@pytest.mark.parametrize(("verb", "fragment"), [("validate", "Exit status"), ("schema", "--markdown"), ("render", "--var"), ("compile", "--target")])
def test_every_graph_verb_has_help(verb: str, fragment: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as info:
        main([verb, "--help"])
    assert info.value.code == 0
    assert fragment in capsys.readouterr().out


def _run_in_terminal(argv: list[str], seconds: float = 60.0) -> bytes:
    """Run the CLI with stdout and stderr on a pseudo-terminal; return everything it wrote."""
    import os
    import pty
    import select
    import subprocess
    import time

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "matpo_graph", *argv], stdout=follower, stderr=follower, cwd=REPO)
    os.close(follower)
    out = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=5)
    os.close(leader)
    return out


OSC52 = "\x1b]52;c;aGVsbG8=\x07"


@pytest.mark.parametrize("text", [OSC52, "\x1b[2J\x1b[H", "\u202egnp.exe", "\x9b31m"])
def test_render_escapes_control_characters_on_a_terminal_but_not_in_a_pipe(tmp_path: Path, text: str):
    graph = tmp_path / "g.yaml"
    graph.write_text(yaml.safe_dump({"name": "g", "root": "a", "roles": {"a": {"system": f"hi {text} there"}}}, allow_unicode=True))
    shown = _run_in_terminal(["render", str(graph), "--role", "a"]).decode("utf-8", "replace")
    assert "hi " in shown and text not in shown and "\x1b" not in shown and "\x9b" not in shown
    piped = subprocess.run([sys.executable, "-m", "matpo_graph", "render", str(graph), "--role", "a"], capture_output=True,
                           text=True, cwd=REPO, timeout=60)
    assert f"hi {text} there" in piped.stdout


def test_validate_of_a_fifo_returns_at_once(tmp_path: Path):
    import os

    fifo = tmp_path / "g.yaml"
    os.mkfifo(fifo)
    out = subprocess.run([sys.executable, "-m", "matpo_graph", "validate", str(fifo)], capture_output=True, text=True,
                         cwd=REPO, timeout=30)
    assert out.returncode == 1 and f"{fifo}:1:1 " in out.stderr and "FIFO" in out.stderr
