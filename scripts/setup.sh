#!/usr/bin/env bash
# Idempotent set-up of a fresh machine: a virtualenv in .venv with every pinned dependency,
# the project installed editable, the embedded model converted and cached.
# Usage: bash scripts/setup.sh [--with-browser]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MATPO_GRAPH_VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

stamp="$VENV/.matpo-graph-installed"
want=$(cat requirements/*.txt pyproject.toml | sha256sum | cut -c1-16)  # every requirements file: main.txt includes the split ones

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r requirements/main.txt
  "$VENV/bin/python" -m pip install -q --no-deps -r requirements/nodeps.txt
  # torchvision/torchaudio/torchcodec break `import vllm` beside the CPU torch; triton is unused on CPU.
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
  echo "$want" > "$stamp"
fi

if [ "${1:-}" = "--with-browser" ] && ! command -v chromium >/dev/null; then
  # Debian's Chromium, for the tests that open the generated HTML pages.
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: chromium missing and not root; browser tests will be skipped" >&2
  fi
fi

# Convert the embedded model once (cached under ~/.cache/matpo-graph).
"$VENV/bin/python" -c "from matpo_graph.runtime.models import resolve_model; resolve_model()" >/dev/null 2>&1 || \
  echo "note: embedded model not prepared yet (it is converted on first use)" >&2
