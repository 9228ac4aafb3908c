"""No JSON Schema reference a graph brings is ever fetched: not at validate, not at compile, not on a tool call.

A loopback server records every request and a canary file stands for the disk; the flow runs in a child
process whose audit hook records every ``open`` of the canary and every ``urllib`` request. The tool call
goes through a tool whose schema check is switched off, as if validation had missed the reference: the
validator's empty registry must still refuse to fetch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import asyncio, json, sys
from pathlib import Path
seen = []
canary = sys.argv[2]
def hook(event, args):
    if event == "urllib.Request" or (event == "open" and args and str(args[0]).endswith(canary)):
        seen.append([event, str(args[0])])
sys.addaudithook(hook)

import yaml
from matpo_graph.compilers.local import compile_graph
from matpo_graph.core import schemas
from matpo_graph.core.errors import GraphError
from matpo_graph.core.loader import check_text
from matpo_graph.core.program import RoleProgram
from matpo_graph.core.spec import Graph
from matpo_graph.core.trust import TrustPolicy
from matpo_graph.runtime.calls import RoleValidators
from matpo_graph.tools import build_tools

url, canary_path = sys.argv[1], sys.argv[3]
trust = TrustPolicy()
report = {}
for name, ref in (("http", url), ("file", "file://" + canary_path)):
    schema = {"type": "object", "properties": {"expression": {"$ref": ref}}}
    tool = {"backend": "python", "description": "calc", "parameters": schema,
            "config": {"function": "matpo_graph.tools.builtin:calculate"}}
    data = {"name": "g", "root": "a", "roles": {"a": {"system": "hi", "tools": ["t"]}}, "tools": {"t": tool}}
    result = check_text(yaml.safe_dump(data), base_dir=Path("."), file="g.yaml", trust=trust)
    entry = {"validate": sorted({i.code for i in result.issues if i.severity == "error"})}
    try:
        compile_graph(Graph.model_validate(data), Path("."), trust=trust)
        entry["compile"] = "compiled"
    except GraphError as exc:
        entry["compile"] = sorted(set(exc.codes()))
    try:
        build_tools({"t": tool}, trust=trust)
        entry["build"] = "built"
    except ValueError as exc:
        entry["build"] = "refused" if "$ref" in str(exc) else str(exc)
    real = schemas.schema_problems
    schemas.schema_problems = lambda schema: []  # as if validation had missed the reference
    try:
        tools = build_tools({"t": tool}, trust=trust)
        called = asyncio.run(tools["t"].call({"expression": "1+1"}))
        entry["call"] = [called.ok, called.error]
        role = RoleProgram.model_validate({
            "name": "a", "description": "", "system": {"source": "", "origin": "inline", "sha256": ""},
            "user": {"source": "", "origin": "inline", "sha256": ""}, "summary": {"source": "", "origin": "inline", "sha256": ""},
            "examples": [], "max_turns": 2, "max_tokens_per_turn": 16, "final_summary": "never", "trainable": True,
            "temperature": None, "policy": "shared",
            "callables": [{"name": "t", "description": "", "parameters": schema, "kind": "tool", "target": "t",
                           "max_parallel": 1, "max_result_chars": 100}]})
        try:
            RoleValidators(role).errors("t", {"expression": "1+1"})
            entry["checker"] = "checked"
        except Exception as exc:
            entry["checker"] = type(exc).__name__
    finally:
        schemas.schema_problems = real
    report[name] = entry
print(json.dumps({"report": report, "seen": seen}))
"""


def test_no_schema_reference_is_fetched_through_validate_compile_and_a_tool_call(server, tmp_path):
    server.routes["/secret.json"] = lambda h, s: h.reply(200, json.dumps({"type": "string"}).encode(), "application/json")
    canary = tmp_path / "canary-schema.json"
    canary.write_text(json.dumps({"type": "integer"}))
    url = server.url + "/secret.json"
    prelude = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1500 << 20, 1500 << 20))\n"
    run = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(CHILD), url, canary.name, str(canary)],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["seen"] == []
    assert server.hits["/secret.json"] == 0
    for entry in out["report"].values():
        assert entry["validate"] == ["invalid-json-schema"]
        assert entry["compile"] == ["invalid-json-schema"]
        assert entry["build"] == "refused"
        assert entry["call"][0] is False  # the argument check failed to resolve, and fetched nothing
        assert entry["checker"] != "checked"
