#!/usr/bin/env bash
# Set-up, build, and the default run: two workers codistilling configs/fmnist_mlp.yaml on
# Fashion-MNIST (each on its own disjoint half of the training set, one thread each),
# ending with a table: each worker's test accuracy, their ensemble's, and the churn
# between them, and a picture of the run (scripts/plot_run.py, RUN_DIR/plots/run.png).
# The run directory is new each time (runs/demo-<date>-<time>).
# Extra arguments go to every worker, e.g. --set train.steps=2000.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
BUILD_TARGETS="codistill-train codistill-inspect" "$root/scripts/build.sh"  # what the demo runs
build="${BUILD_DIR:-$root/build}"
run_dir="${RUN_DIR:-$root/runs/demo-$(date +%Y%m%d-%H%M%S)}"
echo "run_demo.sh: 2 workers codistilling configs/fmnist_mlp.yaml into $run_dir"
"$root/scripts/launch_local.sh" "$root/configs/fmnist_mlp.yaml" 2 --run-dir "$run_dir" \
  --set codistill.enabled=true --set run.threads=1 "$@"

final() {  # the newest checkpoint of worker $1
  ls "$run_dir/$(printf 'worker-%03d' "$1")"/ckpt-*.h5 | sort | tail -n 1
}
a="$(final 0)" b="$(final 1)"
echo
"$build/trainer/codistill-inspect" eval "$a" "$b"
"$build/trainer/codistill-inspect" churn "$a" "$b"
echo
echo "run_demo.sh: metrics in $run_dir/worker-*/metrics.jsonl, logs in $run_dir/worker-*/train.log"
"$root/scripts/plot_run.py" "$run_dir"  # prints the picture's path: RUN_DIR/plots/run.png
