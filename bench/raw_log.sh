# Sourced by the GPU bench scripts: open_raw_log NAME starts bench/results/NAME.txt (the
# raw output committed beside the JSON) and defines log, which appends stdin to it and,
# when COPY_TO is set, to COPY_TO/NAME.txt as it is written (so a run cut short on the GPU
# machine still leaves its output under $OUT).
open_raw_log() {
  raw="$root/bench/results/$1.txt"
  : >"$raw"
  copy_raw=()
  if [ -n "${COPY_TO:-}" ]; then
    mkdir -p "$COPY_TO" && copy_raw=("$COPY_TO/$1.txt") && : >"${copy_raw[0]}"
  fi
}
log() { tee -a "$raw" "${copy_raw[@]}"; }
