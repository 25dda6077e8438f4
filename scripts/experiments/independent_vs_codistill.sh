#!/usr/bin/env bash
# docs/results.md experiments: independent training vs codistillation at the same step
# budget, over several seeds, with churn.
#   scripts/experiments/independent_vs_codistill.sh CONFIG OUT "SEEDS" [train args...]
# SETTINGS (environment) lists the runs per seed as NAME:WORKERS, NAME being indep
# (codistillation off) or codistill; default "indep:2 codistill:2 codistill:4".
# For each seed and setting one launch_local.sh run: an indep pair gives two independent
# models and their 2-model ensemble. Every worker runs one thread; workers share the cores.
# Finished runs are kept and skipped, so an interrupted experiment continues where it was.
# JOBS (environment, default 1) seeds run at once (each seed's settings one after another):
# for a machine with more cores than one seed's workers, or a GPU that one run leaves idle.
# Writes OUT/results.json and prints a table: summarize.py for image runs (codistill-inspect
# for ensembles and churn), summarize_text.py for text runs (their eval events, and the
# steps codistillation takes to reach the independent workers' loss).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 3 ] || { echo "usage: $0 CONFIG OUT \"SEEDS\" [train args...]" >&2; exit 2; }
config="$1" out="$2" seeds="$3"; shift 3
settings="${SETTINGS:-indep:2 codistill:2 codistill:4}"
inspect="${BUILD_DIR:-$root/build}/trainer/codistill-inspect"
mkdir -p "$out"
one_seed() {
  local seed="$1" setting kind n enabled name
  shift
  for setting in $settings; do
    kind="${setting%%:*}" n="${setting##*:}"
    case "$kind" in indep) enabled=false ;; codistill) enabled=true ;;
      *) echo "unknown setting '$setting' (valid: indep:N, codistill:N)" >&2; return 2 ;; esac
    name="$kind-n$n-s$seed"
    [ -f "$out/$name/done" ] && continue
    rm -rf "${out:?}/$name"  # an unfinished earlier attempt
    "$root/scripts/launch_local.sh" "$config" "$n" --run-dir "$out/$name" --set run.seed="$seed" \
      --set run.threads=1 --set codistill.enabled="$enabled" "$@" >"$out/$name.log" || return 1
    touch "$out/$name/done"
  done
}
jobs_max="${JOBS:-1}"
case "$jobs_max" in ''|*[!0-9]*|0) echo "JOBS must be a positive integer, got '$jobs_max'" >&2; exit 2 ;; esac
pids=()
for seed in $seeds; do
  one_seed "$seed" "$@" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
[ "$failed" = 0 ] || { echo "independent_vs_codistill.sh: a run failed (its log: $out/*.log)" >&2; exit 1; }
read -r first _ <<<"$settings"
read -r first_seed _ <<<"$seeds"
first_run="$out/${first%%:*}-n${first##*:}-s$first_seed"
if grep -q '"kind":"text"' "$first_run/worker-000/metrics.jsonl"; then
  exec /usr/bin/python3 "$root/scripts/experiments/summarize_text.py" "$out" "$seeds" "$settings"
fi
/usr/bin/python3 "$root/scripts/experiments/summarize.py" "$out" "$inspect" "$seeds" "$settings"
