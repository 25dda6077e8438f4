#!/usr/bin/env bash
# One mutant of a kernel collective against the SIMT suite: a CTest entry of
# tests/simt_mutants.cmake. Passes only when a SIMT test executable fails with the mutant in
# place after reaching it: a failed assertion, a kernel fault, a crash or a hang all count.
#
#   run_mutant.sh <spec> <test executable>...
#     spec  SIMT_MUTANT's value (tests/support/simt/mutant.hpp), e.g. reduce.cuh:43:removed
#
# The executables run in the order given (those that include the header first), each with
# Catch2's --abort, so the first failure ends it. An executable that fails without having
# reached the mutated site (it cannot start, or it fails without the mutant too) fails the
# entry: that is not a catch. A site no test reaches fails the entry with a message saying so.
set -u

if (($# < 2)); then
  echo "usage: $0 <SIMT_MUTANT spec> <test executable>..." >&2
  exit 2
fi
spec=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A hang on a GPU is a failure too; the executor turns most into deadlock faults.
hang_limit=${SIMT_MUTANT_TIMEOUT:-120}

# The first failure of a Catch2 console log: test case, location and expansion.
first_failure() {
  awk '/^--------------------/ { on = 1 } on { print; if (++n >= 24) exit }' "$1"
}

total_hits=0
for exe in "$@"; do
  name=$(basename "$exe")
  hits=$work/$name.hits
  log=$work/$name.log
  SIMT_MUTANT=$spec SIMT_MUTANT_HITS=$hits timeout "$hang_limit" "$exe" --abort >"$log" 2>&1
  rc=$?
  reached=0
  grep -q '^mutant .* reached at ' "$hits" 2>/dev/null && reached=1
  n=$(sed -n 's/^mutant .*: \([0-9]*\) hits$/\1/p' "$hits" 2>/dev/null | tail -n 1)
  total_hits=$((total_hits + ${n:-0}))
  ((rc == 0)) && continue
  if ((!reached)); then
    echo "FAIL: $name exited with $rc without reaching the mutant $spec: it cannot start, or it" \
         "fails without the mutant (fix that first); not a catch. Its output's end:"
    tail -n 30 "$log"
    exit 1
  fi
  if ((rc == 124)); then
    how="hung (no end within ${hang_limit} s)"
  elif ((rc > 128)) && ! grep -q '^test cases:' "$log"; then
    how="crashed (signal $((rc - 128)))"
  else
    how="a test failed (exit $rc)"
  fi
  echo "caught: mutant $spec, $name: $how; $(paste -sd ';' "$hits")"
  first_failure "$log"
  exit 0
done

if ((total_hits == 0)); then
  echo "FAIL: mutant $spec: no SIMT test reaches this collective, so none can catch its" \
       "mutant; add a test that runs it (executables tried: $*)"
else
  echo "FAIL: mutant $spec survived: reached $total_hits times, and every SIMT test passed;" \
       "add a test that fails without this collective, or remove it if it is unnecessary"
fi
exit 1
