#!/usr/bin/env bash
# docs/results.md experiments: independent training vs codistillation at the same step
# budget, over several seeds, with churn.
#   scripts/experiments/independent_vs_codistill.sh CONFIG OUT "SEEDS" [train args...]
# SETTINGS (environment) lists the runs per seed as NAME:WORKERS, NAME being indep
# (codistillation off) or codistill; default "indep:2 codistill:2 codistill:4".
# For each seed and setting one launch_local.sh run: an indep pair gives two independent
# models and their 2-model ensemble. Every worker runs one thread; workers share the cores.
# Finished runs are kept and skipped, so an interrupted experiment continues where it was.
# Writes OUT/results.json and prints a table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 3 ] || { echo "usage: $0 CONFIG OUT \"SEEDS\" [train args...]" >&2; exit 2; }
config="$1" out="$2" seeds="$3"; shift 3
settings="${SETTINGS:-indep:2 codistill:2 codistill:4}"
inspect="${BUILD_DIR:-$root/build}/trainer/codistill-inspect"
mkdir -p "$out"
for seed in $seeds; do
  for setting in $settings; do
    kind="${setting%%:*}" n="${setting##*:}"
    case "$kind" in indep) enabled=false ;; codistill) enabled=true ;;
      *) echo "unknown setting '$setting' (valid: indep:N, codistill:N)" >&2; exit 2 ;; esac
    name="$kind-n$n-s$seed"
    [ -f "$out/$name/done" ] && continue
    rm -rf "${out:?}/$name"  # an unfinished earlier attempt
    "$root/scripts/launch_local.sh" "$config" "$n" --run-dir "$out/$name" --set run.seed="$seed" \
      --set run.threads=1 --set codistill.enabled="$enabled" "$@" >"$out/$name.log"
    touch "$out/$name/done"
  done
done
/usr/bin/python3 "$root/scripts/experiments/summarize.py" "$out" "$inspect" "$seeds" "$settings"
