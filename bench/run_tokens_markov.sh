#!/usr/bin/env bash
# How close configs/text_gpt.yaml gets to the best possible loss on token shards: an order-2
# Markov chain over VOCAB tokens (tests/trainer/data/write_markov_tokens.py, NumPy) written as
# llm.c shards, trained with data.kind tokens, evaluated on all held-out windows. The floor
# is the true chain's loss on the same held-out tokens; the target is a final held-out loss
# within 0.15 nats of it. Not a timing: it runs anywhere, the machine's load only slows it.
#   STEPS (default 3000, the config's), VOCAB (16), ALPHA (0.3, the Dirichlet concentration of
#   each next-token distribution), TRAIN_TOKENS (2000000), BUILD_DIR (build),
#   OUT (bench/results/tokens_markov_<date>.txt)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
steps="${STEPS:-3000}"
vocab="${VOCAB:-16}"
alpha="${ALPHA:-0.3}"
train_tokens="${TRAIN_TOKENS:-2000000}"
out="${OUT:-$root/bench/results/tokens_markov_$(date -u +%Y-%m-%d).txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
{
  echo "# tokens_markov: configs/text_gpt.yaml on an order-2 Markov chain as llm.c shards"
  echo "# date $(date -u +%FT%TZ), commit $(git -C "$root" rev-parse --short HEAD), cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
  chain=$(/usr/bin/python3 "$root/tests/trainer/data/write_markov_tokens.py" "$work/chain" "$vocab" 1 "$train_tokens" 100000 "$alpha")
  echo "chain: $chain"
  "$build/trainer/codistill-train" --config "$root/configs/text_gpt.yaml" --run-dir "$work/run" \
    --set data.kind=tokens --set data.path="$work/chain/llmc" --set "data.train=train_*.bin" \
    --set "data.valid=valid_*.bin" --set model.vocab_size="$vocab" --set train.steps="$steps" \
    --set train.eval_every=$((steps / 6)) --set checkpoint.every=0 --set data.test_limit=0 2>&1 |
    grep -E "data:|unigram|data shard|eval |done:"
  /usr/bin/python3 - "$work/run/worker-000/metrics.jsonl" "$chain" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
final = [e for e in events if e["event"] == "eval"][-1]
chain = json.loads(sys.argv[2])
gap = final["loss"] - chain["valid_floor"]
print("final held-out loss %.4f nats, floor %.4f (entropy %.4f): gap %.4f nats, target <= 0.15: %s"
      % (final["loss"], chain["valid_floor"], chain["entropy"], gap, "met" if gap <= 0.15 else "NOT met"))
PY
} | tee "$out"
