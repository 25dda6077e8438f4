# Sourced by the GPU bench scripts (run_loss_bench_cuda.sh, run_train_bench_cuda.sh):
# bench_commit BUNDLE sets `commit`, the commit the numbers come from, and `bundle_commit`.
# commit: HEAD of the tree in this folder ("-dirty" when tracked files changed); outside a
# checkout (a relocatable bundle on the GPU machine, scripts/bundle.sh), the commit that
# BUNDLE/build-info.txt records, marked " (bundle)"; empty when neither is known.
# bundle_commit: that recorded commit whenever BUNDLE (may be empty) has one.
bench_commit() {
  local bundle="$1"
  commit="$(git rev-parse --short HEAD 2>/dev/null || true)"
  if [ -n "$commit" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit-dirty"
  fi
  bundle_commit=""
  [ -n "$bundle" ] && bundle_commit="$(sed -n 's/^commit=//p' "$bundle/build-info.txt" 2>/dev/null || true)"
  [ -z "$commit" ] && [ -n "$bundle_commit" ] && commit="$bundle_commit (bundle)"
  return 0  # the tests above are not failures (the callers run under set -e)
}
