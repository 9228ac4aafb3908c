#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite, engine and browser tests included.
#
# With no arguments it runs in two parts: veRL's own trainer run alone first (Ray, FSDP and a vLLM server need
# ~16 GB and every core), then everything else on one pytest-xdist worker per core, each worker pinned to a core
# of its own (tests/conftest.py). Arguments go to a single pytest call instead, e.g.
# `bash scripts/test.sh -m "not engine"` or `bash scripts/test.sh -n 2 tests/rl`.
# MATPO_TEST_WORKERS sets the worker count of the second part (default: the cores, at most 2; 0 runs it serially).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-browser
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
PYTEST=(.venv/bin/python -m pytest -q)
if [ $# -gt 0 ]; then
  exec "${PYTEST[@]}" --durations=25 "$@"
fi
cores=$(.venv/bin/python -c "import os; print(len(os.sched_getaffinity(0)))")
workers=${MATPO_TEST_WORKERS:-$(( cores < 2 ? cores : 2 ))}
VERL_RUN=tests/verl/test_verl_cpu_run.py
status=0
"${PYTEST[@]}" --durations=5 "$VERL_RUN" || status=$?
[ "$status" -eq 5 ] && status=0  # 5: nothing collected (verl or vllm not installed: the module skips)
# --durations: the slowest tests are listed at the end, to keep the suite short where it can be
if [ "$workers" -gt 1 ]; then
  "${PYTEST[@]}" --durations=25 -n "$workers" --dist loadfile --no-loadscope-reorder --ignore "$VERL_RUN" || status=$?
else
  "${PYTEST[@]}" --durations=25 --ignore "$VERL_RUN" || status=$?
fi
exit "$status"
