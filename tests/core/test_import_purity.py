"""The pure core and the graph front end import no heavy engine and no HTTP client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "vllm", "verl", "httpx")

SCRIPT = """
import json, sys
from pathlib import Path
import matpo_graph, matpo_graph.core
from matpo_graph.core import errors, loader, program, spec, templates, validate, yaml_loader
from matpo_graph.compilers import local, mermaid
import matpo_graph.cli.graph_verbs as verbs
graph = loader.load_graph(Path(sys.argv[1]))
prog, plan = local.compile_graph(graph, Path(sys.argv[1]).parent)
mermaid.to_mermaid(graph)
verbs.schema_text(); verbs.dsl_reference_markdown()
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy})))
"""


def test_import_purity_core_load_validate_compile():
    script = SCRIPT.replace("{heavy}", repr(set(HEAVY)))
    out = subprocess.run(
        [sys.executable, "-c", script, str(REPO / "graphs" / "deep_search.yaml")],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
