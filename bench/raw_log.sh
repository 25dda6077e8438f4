# Sourced by bench scripts: open_raw_log NAME [DIR] starts DIR/NAME.txt (DIR: bench/results
# by default; the raw output committed beside the JSON) and defines log, which appends stdin
# to it and, when COPY_TO is set (the GPU scripts), to COPY_TO/NAME.txt as it is written (so
# a run cut short on the GPU machine still leaves its output under $OUT).
open_raw_log() {
  local dir="${2:-$root/bench/results}"
  mkdir -p "$dir"
  raw="$dir/$1.txt"
  : >"$raw"
  copy_raw=()
  if [ -n "${COPY_TO:-}" ]; then
    mkdir -p "$COPY_TO" && copy_raw=("$COPY_TO/$1.txt") && : >"${copy_raw[0]}"
  fi
}
log() { tee -a "$raw" "${copy_raw[@]}"; }
