# Sourced by bench/run_gpt_step_bench.sh and bench/run_gpt_bf16_bench.sh (after they set
# `root` and cd there), which time the same program, bench/bench_gpt_step, on the same model:
# reads the environment both document (BUILD_DIR, SKIP_BUILD, RESULTS_DIR, ROUNDS, THREADS and
# the model's B, T, D, HEADS, LAYERS, V, STEPS, WARMUP), builds the program unless SKIP_BUILD=1,
# and sets build, rounds, threads, results, bin (the program) and args (its command line).
# gpt_step_start NAME then opens RESULTS_DIR/NAME.txt (bench/raw_log.sh: `log` appends to
# it), makes the file `runs` (one JSON line per run, removed on exit) and logs the load at
# the start and the arguments.
script="$(basename "$0")"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
rounds="${ROUNDS:-3}" threads="${THREADS:-2}"
results="${RESULTS_DIR:-$root/bench/results}"
[ "${SKIP_BUILD:-0}" = 1 ] || cmake --build "$build" --target bench_gpt_step -j "$threads" >/dev/null
bin="$build/bench/bench_gpt_step"
[ -x "$bin" ] || { echo "$script: no $bin" >&2; exit 1; }
args=(--B "${B:-8}" --T "${T:-128}" --D "${D:-128}" --heads "${HEADS:-4}" --layers "${LAYERS:-4}" --V "${V:-8192}"
      --threads "$threads" --steps "${STEPS:-10}" --warmup "${WARMUP:-2}")
. "$root/bench/raw_log.sh"

gpt_step_start() {
  open_raw_log "$1" "$results"
  runs="$(mktemp)"
  trap 'rm -f "$runs"' EXIT
  echo "uptime at start: $(uptime)" | log
  echo "args: ${args[*]}; rounds $rounds; build $build" | log
}
