# Sourced by the CPU bench scripts: codistill_contenders SCRIPT PROGRAM sets `contenders`
# (codistill, [codistill-before,] pytorch, jax) and the map `bin` from contender to the
# codistill program measured (PROGRAM, relative to a build directory: $build, and
# $BEFORE_BUILD when set, whose real path goes to `before`), and checks that they and the JAX interpreter ($jax_python) exist.
codistill_contenders() {
  local script="$1" program="$2"
  contenders=(codistill)
  declare -gA bin=([codistill]="$build/$program")
  if [ -n "${BEFORE_BUILD:-}" ]; then
    before="$(realpath "$BEFORE_BUILD")"
    contenders+=(codistill-before)
    bin[codistill-before]="$before/$program"
  fi
  contenders+=(pytorch jax)
  local c
  for c in "${!bin[@]}"; do
    [ -x "${bin[$c]}" ] || { echo "$script: no ${bin[$c]} ($c)" >&2; exit 1; }
  done
  [ -x "$jax_python" ] || { echo "$script: no $jax_python (scripts/setup.sh --bench)" >&2; exit 1; }
}
