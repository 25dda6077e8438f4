#!/usr/bin/env bash
# Set-up, build, and the default run: fmnist_mlp trained as one worker on Fashion-MNIST.
# The run directory is new each time (runs/demo-<date>-<time>): nothing is overwritten.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
run_dir="${RUN_DIR:-$root/runs/demo-$(date +%Y%m%d-%H%M%S)}"
echo "run_demo.sh: training configs/fmnist_mlp.yaml into $run_dir"
"${BUILD_DIR:-$root/build}/trainer/codistill-train" --config "$root/configs/fmnist_mlp.yaml" \
  --run-dir "$run_dir" "$@"
echo "run_demo.sh: metrics in $run_dir/worker-000/metrics.jsonl, log in $run_dir/worker-000/train.log"
