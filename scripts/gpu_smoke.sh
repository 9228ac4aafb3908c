#!/usr/bin/env bash
# GPU smoke run of the veRL target: a few MATPO steps of a graph on the embedded web with a tiny
# randomly initialised model (SmolLM2's tokenizer, random Llama weights: nothing is downloaded).
# Checks that bundle, agent loop, trainer mode and reward run end to end; the model learns nothing.
# Needs one CUDA GPU and veRL 0.9.1 with its GPU stack (vLLM, flash-attn as veRL requires).
#
# Usage: bash scripts/gpu_smoke.sh [GRAPH] [hydra overrides...]
#   OUT=runs/gpu_smoke  STEPS=3  PYTHON=python
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
GRAPH=${1:-graphs/deep_search.yaml}
if [ $# -gt 0 ]; then shift; fi
OUT=${OUT:-runs/gpu_smoke}
STEPS=${STEPS:-3}

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_smoke: no CUDA GPU visible to $PY (torch.cuda.is_available() is False); nothing to do" >&2
  exit 2
fi
"$PY" -c 'import verl, vllm' || { echo "gpu_smoke: veRL and vLLM must be importable" >&2; exit 2; }

mkdir -p "$OUT"
MODEL="$OUT/tiny_model"
"$PY" -m matpo_graph.verl_target.smoke "$MODEL" >/dev/null
echo "gpu_smoke: tiny model in $MODEL; training $GRAPH for $STEPS steps into $OUT"

export AGENT_WORKERS=1 GPU_MEMORY_UTILIZATION=0.3 N_GPUS=1
set +e
"$PY" -m matpo_graph train "$GRAPH" \
  "actor_rollout_ref.model.path=$MODEL" \
  "trainer.total_training_steps=$STEPS" \
  data.train_batch_size=2 \
  actor_rollout_ref.actor.ppo_mini_batch_size=2 \
  data.train_max_samples=16 \
  data.val_max_samples=4 \
  actor_rollout_ref.rollout.enforce_eager=true \
  trainer.val_before_train=false \
  trainer.test_freq=-1 \
  trainer.save_freq=-1 \
  "$@" \
  --engine verl --device cuda --out "$OUT" 2>&1 | tee "$OUT/smoke.log"
status=${PIPESTATUS[0]}
set -e

if [ "$status" -ne 0 ]; then
  echo "gpu_smoke: FAILED (exit $status); log in $OUT/smoke.log" >&2
  exit "$status"
fi
if ! grep -q "matpo/optimizer_steps" "$OUT/smoke.log"; then
  echo "gpu_smoke: FAILED: the run ended but logged no MATPO training step; log in $OUT/smoke.log" >&2
  exit 1
fi
echo "gpu_smoke: OK ($STEPS steps; log in $OUT/smoke.log)"
