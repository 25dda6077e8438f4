#!/usr/bin/env bash
# docs/results.md experiments (a) and (b): independent training vs 2-way and 4-way
# codistillation at the same step budget, over several seeds, and churn.
#   scripts/experiments/independent_vs_codistill.sh CONFIG OUT "SEEDS" [train args...]
# For each seed: a pair of independent workers (codistill off: two independent models and
# their 2-model ensemble), a 2-way and a 4-way codistilled run. Writes OUT/results.json
# and prints a table. Every worker runs one thread; workers share the cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 3 ] || { echo "usage: $0 CONFIG OUT \"SEEDS\" [train args...]" >&2; exit 2; }
config="$1" out="$2" seeds="$3"; shift 3
inspect="${BUILD_DIR:-$root/build}/trainer/codistill-inspect"
mkdir -p "$out"
for seed in $seeds; do
  for setting in "indep 2 false" "codistill 2 true" "codistill 4 true"; do
    set -- $setting "$@"
    name="$1-n$2-s$seed" n="$2" enabled="$3"; shift 3
    [ -f "$out/$name/done" ] && continue
    "$root/scripts/launch_local.sh" "$config" "$n" --run-dir "$out/$name" --set run.seed="$seed" \
      --set run.threads=1 --set codistill.enabled="$enabled" "$@" >"$out/$name.log"
    touch "$out/$name/done"
  done
done
/usr/bin/python3 - "$out" "$inspect" "$seeds" <<'PY'
import glob, json, os, statistics as st, subprocess, sys
out, inspect, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split()
def final(run, w):
    return sorted(glob.glob(f"{out}/{run}/worker-{w:03d}/ckpt-*.h5"))[-1]
def done(run, w):
    return [json.loads(l) for l in open(f"{out}/{run}/worker-{w:03d}/metrics.jsonl") if '"done"' in l][-1]
def js(*args):
    return json.loads(subprocess.run([inspect, *args, "--json"], check=True, capture_output=True, text=True).stdout)
rows = {}
for seed in seeds:
    for name, n in (("indep", 2), ("codistill", 2), ("codistill", 4)):
        run = f"{name}-n{n}-s{seed}"
        ws = [done(run, w) for w in range(n)]
        r = rows.setdefault(f"{name}-n{n}", {"acc": [], "loss": [], "pair_churn": [], "ensemble2": [], "w0": []})
        r["acc"] += [w["accuracy"] for w in ws]
        r["loss"] += [w["loss"] for w in ws]
        r["pair_churn"].append(js("churn", final(run, 0), final(run, 1))["churn"])
        r["ensemble2"].append(js("eval", final(run, 0), final(run, 1))["ensemble"]["accuracy"])
        r["w0"].append(final(run, 0))
for r in rows.values():  # retrain churn: worker 0 of runs with different seeds
    ck = r.pop("w0")
    r["retrain_churn"] = [js("churn", ck[i], ck[j])["churn"] for i in range(len(ck)) for j in range(i + 1, len(ck))]
def ms(v):
    return f"{100*st.mean(v):.2f} ± {100*(st.stdev(v) if len(v) > 1 else 0):.2f}"
print(f"{'setting':<14} {'workers acc %':>16} {'test loss':>14} {'2-model ens %':>16} {'pair churn %':>14} {'retrain churn %':>16}")
for k, r in rows.items():
    print(f"{k:<14} {ms(r['acc']):>16} {st.mean(r['loss']):>8.4f} ± {st.stdev(r['loss']):.4f} {ms(r['ensemble2']):>16} "
          f"{ms(r['pair_churn']):>14} {ms(r['retrain_churn']):>16}")
json.dump(rows, open(f"{out}/results.json", "w"), indent=1)
PY
