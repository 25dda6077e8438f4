#!/usr/bin/env bash
# docs/results.md: classic distillation from fixed teachers. For each seed, the student
# config trained alone and distilled from the 2-model ensemble of that seed's independent
# pair of an independent_vs_codistill.sh experiment (TEACHERS/indep-n2-sSEED, a run
# directory: both workers' final checkpoints are the fixed teachers).
#   scripts/experiments/fixed_teacher.sh STUDENT_CONFIG TEACHERS OUT "SEEDS" [train args...]
# Finished runs are kept and skipped. Writes OUT/results.json and prints a table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 4 ] || { echo "usage: $0 STUDENT_CONFIG TEACHERS OUT \"SEEDS\" [train args...]" >&2; exit 2; }
config="$1" teachers="$(cd "$2" && pwd)" out="$3" seeds="$4"; shift 4
exe="${BUILD_DIR:-$root/build}/trainer/codistill-train"
mkdir -p "$out"
for seed in $seeds; do
  [ -f "$teachers/indep-n2-s$seed/done" ] || { echo "no finished teacher pair $teachers/indep-n2-s$seed" >&2; exit 2; }
  for kind in alone distilled; do
    name="$kind-s$seed"
    [ -f "$out/$name/done" ] && continue
    rm -rf "${out:?}/$name"
    fixed="[]"
    [ "$kind" = distilled ] && fixed="[$teachers/indep-n2-s$seed]"
    "$exe" --config "$config" --run-dir "$out/$name" --set run.seed="$seed" \
      --set codistill.fixed_teachers="$fixed" "$@" >"$out/$name.log" 2>&1
    touch "$out/$name/done"
  done
done
/usr/bin/python3 - "$out" "$teachers" "$seeds" <<'PY'
import json, statistics as st, sys
out, teachers, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split()
def done(run, w=0):
    with open(f"{run}/worker-{w:03d}/metrics.jsonl") as f:
        return [json.loads(l) for l in f if '"done"' in l][-1]
def ms(v):
    return f"{100 * st.mean(v):.2f} ± {100 * (st.stdev(v) if len(v) > 1 else 0):.2f}"
rows = {}
for s in seeds:
    for kind in ("alone", "distilled"):
        d = done(f"{out}/{kind}-s{s}")
        r = rows.setdefault(kind, {"acc": [], "loss": []})
        r["acc"].append(d["accuracy"]); r["loss"].append(d["loss"])
    r = rows.setdefault("teachers (each)", {"acc": [], "loss": []})
    for w in (0, 1):
        d = done(f"{teachers}/indep-n2-s{s}", w)
        r["acc"].append(d["accuracy"]); r["loss"].append(d["loss"])
print(f"{'student':<16} {'test acc %':>16} {'test loss':>18}")
for k, r in rows.items():
    print(f"{k:<16} {ms(r['acc']):>16} {st.mean(r['loss']):>9.4f} ± {st.stdev(r['loss']) if len(r['loss']) > 1 else 0:.4f}")
with open(f"{out}/results.json", "w") as f:
    json.dump(rows, f, indent=1)
PY
