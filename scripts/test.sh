#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite, engine and browser tests included.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not engine"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-browser
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
# --durations: the slowest tests are listed at the end, to keep the suite short where it can be
exec .venv/bin/python -m pytest -q --durations=25 "$@"
