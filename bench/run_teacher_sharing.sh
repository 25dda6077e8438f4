#!/usr/bin/env bash
# Teachers' memory per node with and without codistill.share_teachers (issue 37): a 2-rank
# worker group (mpirun -np 2) with one GPT-2-124M-shaped bf16 teacher, the ranks' PSS summed
# (bench/teacher_sharing_pss.py says how). Raw output, with the CPU model, the commit and the
# load, to OUT (default bench/results/teacher_sharing_<date>.txt). Environment: BUILD_DIR
# (build/, with codistill-train built), MPIRUN (mpirun), OUT.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
out="${OUT:-$root/bench/results/teacher_sharing_$(date -u +%F).txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
commit="$(git rev-parse --short HEAD)"
[ -n "$(git status --porcelain --untracked-files=no)" ] && commit="$commit-dirty"
{
  echo "teacher sharing: $(date -u +%FT%TZ), commit $commit (binary: $build/trainer/codistill-train, built $(date -u -r "$build/trainer/codistill-train" +%FT%TZ))"
  lscpu | grep -E '^(Model name|CPU\(s\))'
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); memory: $(free -m | awk '/^Mem/ {print $2 " MiB total, " $7 " MiB available"}')"
  echo "/dev/shm: $(df -h /dev/shm | awk 'NR == 2 {print $2 " size, " $4 " free"}')"
  python3 bench/teacher_sharing_pss.py "$build" "$work/w" "${MPIRUN:-mpirun}"
} 2>&1 | tee "$out"
