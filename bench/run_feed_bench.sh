#!/usr/bin/env bash
# What a user's file formats cost the CPU step's batch preparation, against the project's own
# (bench/data/bench_feed.cpp): Fashion-MNIST from IDX against the same pixels as .npy, and the
# Python docs as a prepared token file against the same stream as an llm.c shard. Then the
# step times of configs/fmnist_mlp.yaml (from .npy) and configs/text_gpt.yaml (from the
# shard) from short training runs, to put the batch times against. Run on a quiet machine.
#   BUILD_DIR (build), REPS (2000), ROUNDS (4), STEPS_MLP (1000), STEPS_GPT (60),
#   OUT (bench/results/feed_<date>.txt)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${OUT:-$root/bench/results/feed_$(date -u +%Y-%m-%d).txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$root/tests/codistill/data/write_arrays.py" fmnist "$work/arrays"
"$build/trainer/codistill-prepare-text" --corpus /usr/share/doc/python3.11/html/_sources --suffix .rst.txt \
  --out "$work/text" >/dev/null
{
  echo "# feed: batch preparation by format, and the steps it feeds"
  echo "# date $(date -u +%FT%TZ), commit $(git -C "$root" rev-parse --short HEAD), cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$build/bench/bench_feed" --npy "$work/arrays/npy" --text "$work/text" --reps "${REPS:-2000}" \
    --rounds "${ROUNDS:-4}"
  "$build/trainer/codistill-train" --config "$root/configs/fmnist_mlp.yaml" --run-dir "$work/mlp" \
    --set data.kind=arrays --set data.path="$work/arrays/npy" --set train.steps="${STEPS_MLP:-1000}" \
    --set train.eval_every=0 --set checkpoint.every=0 2>&1 | grep "done:"
  # Random tokens of the config's vocabulary as llm.c shards: the step's cost does not depend
  # on what the tokens say.
  mkdir -p "$work/chain/llmc"
  /usr/bin/python3 -c "
import numpy as np, sys
for name, n in (('train_000', 400000), ('valid_000', 20000)):
    h = np.zeros(256, np.int32); h[:3] = 20240520, 1, n
    open(sys.argv[1] + '/' + name + '.bin', 'wb').write(h.tobytes() + np.random.default_rng(1).integers(0, 8192, n).astype(np.uint16).tobytes())
" "$work/chain/llmc"
  "$build/trainer/codistill-train" --config "$root/configs/text_gpt.yaml" --run-dir "$work/gpt" \
    --set data.kind=tokens --set data.path="$work/chain/llmc" --set "data.train=train_*.bin" \
    --set "data.valid=valid_*.bin" --set model.vocab_size=8192 --set train.steps="${STEPS_GPT:-60}" \
    --set train.eval_every=0 --set checkpoint.every=0 --set data.test_limit=10 2>&1 | grep "done:"
} | tee "$out"
