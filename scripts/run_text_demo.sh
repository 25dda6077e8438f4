#!/usr/bin/env bash
# Two workers codistilling a small GPT (configs/text_gpt.yaml) on the Python 3.11
# documentation, each on its own disjoint half of the documents. Prepares the token files
# (data/python-docs) first when they are missing.
# Extra arguments go to every worker, e.g. --set train.steps=500.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
data="${TEXT_DATA:-$root/data/python-docs}"
corpus=/usr/share/doc/python3.11/html/_sources
if [[ ! -f "$data/prepare.json" ]]; then  # written last by codistill-prepare-text
  [[ -d "$corpus" ]] || { echo "run_text_demo.sh: $corpus is missing: install python3.11-doc (scripts/setup.sh)" >&2; exit 2; }
  "$build/trainer/codistill-prepare-text" --corpus "$corpus" --out "$data" --force
fi
run_dir="${RUN_DIR:-$root/runs/text-demo-$(date +%Y%m%d-%H%M%S)}"
echo "run_text_demo.sh: 2 workers codistilling configs/text_gpt.yaml into $run_dir"
"$root/scripts/launch_local.sh" "$root/configs/text_gpt.yaml" 2 --run-dir "$run_dir" \
  --set data.path="$data" --set codistill.enabled=true --set run.threads=1 "$@"
echo
# codistill-inspect eval takes image checkpoints only: the runs' own eval events say it.
for m in "$run_dir"/worker-*/metrics.jsonl; do
  python3 - "$m" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
base = next((e["unigram_ce"] for e in events if e["event"] == "data"), None)
done = [e for e in events if e["event"] == "eval"][-1]
print(f"{sys.argv[1]}: held-out loss {done['loss']:.4f} nats/token (unigram baseline {base:.4f}), "
      f"perplexity {done['perplexity']:.2f}, next-token accuracy {100 * done['accuracy']:.2f}%, churn {done['churn']}")
PY
done
