#!/usr/bin/env bash
# Makes a relocatable bundle of codistill for a machine that lacks this project's build
# dependencies (HDF5, yaml-cpp, Boost, OpenBLAS...), e.g. the GPU machine: the programs
# (codistill-train, codistill-inspect, codistill-prepare-text, the bench programs, the test
# executables) in OUT/bin and the shared libraries they need in OUT/lib, found through an rpath
# ($ORIGIN/../lib, patchelf), so that they run from any folder with no LD_LIBRARY_PATH.
#   scripts/bundle.sh [--build-dir DIR] [--no-build] [--out DIR] [--no-tests] [--no-data]
#                     [--no-strip] [--tar]
#   --build-dir DIR  use this build (default: build-bundle/, configured Release with the
#                    benches, the tests and CUDA when nvcc is there); built unless --no-build
#   --out DIR        the bundle (default: bundle/, ignored by git); replaced if it is a bundle
#   --no-tests       leave the test executables out
#   --no-data        leave Fashion-MNIST (30 MB) out of OUT/data/fashion-mnist
#   --tar            also write OUT.tar.xz (all but the data: one compressed file to carry)
#                    and OUT-data.tar.xz (OUT/data alone, its idx files uncompressed: gzip
#                    them after unpacking); both unpack into OUT/ (tar xf, from OUT's parent)
# What is left to the target machine: glibc (libc, libm, libpthread, libdl, librt,
# libresolv, ld-linux...), libstdc++ and libgcc_s (build-info.txt names the newest GLIBC_
# and GLIBCXX_ symbol versions the programs need: the target's must be at least as new),
# the CUDA driver (libcuda), cuDNN (its small front library loads engine libraries of
# hundreds of MB at run time, all of one version) and any other CUDA library bigger than
# CUDA_MAX_MB (default 8: cuBLAS/cuBLASLt, 600 MB). The CUDA runtime (libcudart, under
# 1 MB) is bundled. The GPU machine has the others in its Python's site-packages
# (nvidia/*/lib) or in /usr/local/cuda: OUT/env.sh, sourced before a run, adds the folders
# that hold the missing ones to LD_LIBRARY_PATH.
# Also in the bundle: OUT/run_ctest.sh (runs the test executables there), OUT/env.sh,
# OUT/build-info.txt (commit, compiler, CUDA, the absolute build paths the tests know),
# OUT/wheels (bench/wheels/*.whl, bench/fetch_wheels.sh) and OUT/data.
# The device tool carries at most 64 MiB with the working tree: carry OUT.tar.xz (about
# 22 MB) and, where Fashion-MNIST is needed, OUT-data.tar (30 MB), and unpack them there;
# the sizes are printed at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="" out="$root/bundle" do_build=1 tests=1 data=1 strip=1 tar=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --out) out="$2"; shift 2 ;;
    --no-tests) tests=0; shift ;;
    --no-data) data=0; shift ;;
    --no-strip) strip=0; shift ;;
    --tar) tar=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bundle.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
cuda_max_mb="${CUDA_MAX_MB:-8}"
command -v patchelf >/dev/null || "$root/scripts/setup.sh"
command -v patchelf >/dev/null || { echo "bundle.sh: patchelf is missing (scripts/setup.sh installs it)" >&2; exit 1; }

if [ -z "$build" ]; then
  build="$root/build-bundle"
  [ -f "$build/CMakeCache.txt" ] ||
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCODISTILL_BENCH=ON -DCODISTILL_TESTS=ON >/dev/null
fi
build="$(cd "$build" && pwd)"
[ -f "$build/CMakeCache.txt" ] || { echo "bundle.sh: $build is not a CMake build folder" >&2; exit 2; }
if [ "$do_build" = 1 ]; then
  cmake --build "$build" -j "${JOBS:-$(nproc)}" >"$build/bundle-build.log" 2>&1 ||
    { tail -n 30 "$build/bundle-build.log" >&2; echo "bundle.sh: the build failed ($build/bundle-build.log)" >&2; exit 1; }
fi

# ---- the programs ----------------------------------------------------------------------
progs=()
for p in "$build/trainer/codistill-train" "$build/trainer/codistill-inspect" "$build/trainer/codistill-prepare-text"; do
  [ -x "$p" ] || { echo "bundle.sh: $p is not built" >&2; exit 1; }
  progs+=("$p")
done
while IFS= read -r p; do progs+=("$p"); done < <(find "$build/bench" -maxdepth 1 -type f -perm -u+x -name 'bench_*' | sort)
if [ "$tests" = 1 ]; then
  while IFS= read -r p; do progs+=("$p"); done < <(find "$build/tests" -maxdepth 1 -type f -perm -u+x -name 'test_*' | sort)
  # The rank programs test_process_group_{mpi,nccl} start under mpirun.
  for p in "$build/tests/nccl_ranks" "$build/tests/process_group_ranks"; do
    [ -x "$p" ] && progs+=("$p")
  done
fi

if [ -e "$out" ]; then
  [ -f "$out/build-info.txt" ] || { echo "bundle.sh: $out exists and is not a bundle: not touching it" >&2; exit 2; }
  rm -rf "$out"
fi
mkdir -p "$out/bin" "$out/lib"
out="$(cd "$out" && pwd)"
for p in "${progs[@]}"; do cp "$p" "$out/bin/"; done

# ---- their shared libraries ------------------------------------------------------------
# Left to the target: glibc, libstdc++/libgcc_s, the CUDA driver.
system_lib() {
  case "$1" in
    # glibc (its libraries share private symbols: all must come from the target's glibc)
    linux-vdso.so*|ld-linux*.so*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*) return 0 ;;
    libutil.so.*|libresolv.so.*|libnsl.so.*|libanl.so.*|libnss_*|libmvec.so.*|libBrokenLocale.so.*) return 0 ;;
    libthread_db.so.*|libc_malloc_debug.so.*|libmemusage.so|libpcprofile.so) return 0 ;;
    libstdc++.so.*|libgcc_s.so.*) return 0 ;;
    libcuda.so*|libnvidia-*.so*) return 0 ;;
  esac
  return 1
}
cuda_lib() { case "$1" in libcu*|libnv*) return 0 ;; esac; return 1; }
declare -A bundled=() host=()
while read -r soname path; do
  system_lib "$soname" && continue
  [ -n "${bundled[$soname]:-}${host[$soname]:-}" ] && continue
  case "$soname" in
    # cuDNN loads its engine libraries (hundreds of MB) at run time: all from one install.
    libcudnn*) host[$soname]="cuDNN"; continue ;;
  esac
  if cuda_lib "$soname"; then
    size_mb=$(( $(stat -L -c %s "$path") / 1048576 ))
    if [ "$size_mb" -ge "$cuda_max_mb" ]; then
      host[$soname]="$size_mb MB"
      continue
    fi
  fi
  cp -L "$path" "$out/lib/$soname"
  chmod u+w "$out/lib/$soname"
  bundled[$soname]="$path"
done < <(for p in "$out"/bin/*; do ldd "$p"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)

if [ "$strip" = 1 ]; then
  strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
fi
for f in "$out"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$out"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f"; done

# ---- check: every library resolves inside the bundle, or is one left to the target ------
bad=0
while read -r soname arrow path _; do
  [ "$arrow" = "=>" ] || continue
  system_lib "$soname" && continue
  if [ "$path" = "not" ]; then
    [ -n "${host[$soname]:-}" ] && continue
    echo "bundle.sh: $soname is not found" >&2; bad=1; continue
  fi
  case "$(readlink -f "$path")" in
    "$out"/lib/*) ;;
    *) [ -n "${host[$soname]:-}" ] && continue
       echo "bundle.sh: $soname resolves outside the bundle: $path" >&2; bad=1 ;;
  esac
done < <(for p in "$out"/bin/* "$out"/lib/*; do env -i PATH=/usr/bin:/bin ldd "$p" 2>/dev/null; done | sort -u)
[ "$bad" = 0 ] || { echo "bundle.sh: the bundle is not self-contained" >&2; exit 1; }

# ---- OpenMPI's runtime, where the programs link libmpi (the GPU machine has no OpenMPI) ----
if [ -n "${bundled[libmpi.so.40]:-}" ]; then
  "$root/scripts/bundle_openmpi.sh" "$out"
fi

# ---- what the target must provide, and how the bundle was made ---------------------------
newest() {  # newest symbol version of a family (GLIBC_, GLIBCXX_) that the programs need
  for f in "$out"/bin/* "$out"/lib/*; do objdump -T "$f" 2>/dev/null; done |
    grep -o "$1[0-9.]*" | sort -u -V | tail -n 1
}
src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit-dirty"
nvcc="$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
{
  echo "commit=$commit"
  echo "date=$(date -Iseconds)"
  echo "built_on=$(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m))"
  echo "source_dir=$src"
  echo "binary_dir=$build"
  echo "cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt") $(c++ -dumpfullversion 2>/dev/null || true)"
  echo "cuda=$([ -n "$nvcc" ] && "$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p' || echo off)"
  echo "cuda_architectures=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")"
  echo "needs_glibc=$(newest GLIBC_)"
  echo "needs_glibcxx=$(newest GLIBCXX_)"
  echo "left_to_host=${!host[*]}"
} >"$out/build-info.txt"

if [ "$data" = 1 ]; then
  fm=/usr/share/datasets/fashion-mnist
  if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$out/data/fashion-mnist"
    cp "$fm"/*-ubyte.gz "$out/data/fashion-mnist/"
  else
    echo "bundle.sh: no $fm here (scripts/setup.sh installs it): no data in the bundle" >&2
  fi
fi
if compgen -G "$root/bench/wheels/*.whl" >/dev/null; then
  mkdir -p "$out/wheels" && cp "$root"/bench/wheels/*.whl "$out/wheels/"
fi

# ---- env.sh: the CUDA libraries left to the host ---------------------------------------------
cat >"$out/env.sh" <<'EOF'
# shellcheck shell=bash
# Sourced (bash) before running this bundle's programs: finds, on this machine, the shared
# libraries the bundle leaves to the host (build-info.txt: left_to_host, e.g. cuBLAS) and
# adds their folders to LD_LIBRARY_PATH: the CUDA toolkit's, or the nvidia-* wheels of the
# Python that holds torch ($PYTHON, default python3). Prints what it could not find.
codistill_bundle="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
codistill_missing="$(for f in "$codistill_bundle"/bin/*; do ldd "$f" 2>/dev/null; done |
  awk '$2 == "=>" && $3 == "not" {print $1}' | sort -u)"
if [ -n "$codistill_missing" ]; then
  codistill_dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  while IFS= read -r d; do codistill_dirs+=("$d"); done < <("${PYTHON:-python3}" - 2>/dev/null <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib")) + glob.glob(os.path.join(r, "nvidia", "*", "*", "lib"))):
        print(d)
PY
)
  for lib in $codistill_missing; do
    codistill_found=""
    for d in "${codistill_dirs[@]}"; do
      if [ -e "$d/$lib" ]; then codistill_found="$d"; break; fi
    done
    if [ -n "$codistill_found" ]; then
      case ":${LD_LIBRARY_PATH:-}:" in
        *":$codistill_found:"*) ;;
        *) export LD_LIBRARY_PATH="$codistill_found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
      esac
    else
      echo "env.sh: $lib (needed by the bundle) is not on this machine" >&2
    fi
  done
fi
unset codistill_missing codistill_dirs codistill_found
# The bundled OpenMPI (scripts/bundle_openmpi.sh), relocated: the programs' libmpi needs its
# own mpirun and components, whatever MPI this machine has. The tests start mpirun through
# CODISTILL_TEST_MPIEXEC (their built-in path is the build machine's).
if [ -x "$codistill_bundle/openmpi/bin/orterun" ]; then
  export OPAL_PREFIX="$codistill_bundle/openmpi" PMIX_PREFIX="$codistill_bundle/openmpi/pmix"
  # This PMIx has its components built in; where the machine has a PMIx of its own, that
  # one's plugin folder sits at the path compiled in here and its plugins fail to load
  # (undefined symbols): harmless, and not worth a message per process.
  export PMIX_MCA_pmix_mca_base_component_show_load_errors=0
  export PATH="$codistill_bundle/openmpi/bin:$PATH"
  export CODISTILL_TEST_MPIEXEC="$codistill_bundle/openmpi/bin/mpiexec"
fi
EOF

# ---- run_ctest.sh: the test suite on the target ----------------------------------------------
cat >"$out/run_ctest.sh" <<'EOF'
#!/usr/bin/env bash
# Runs this bundle's test executables (each a Catch2 program; CTest's test list holds the
# build machine's absolute paths, so this runs the executables themselves), one after the
# other, and prints one line per executable and a summary; exit 1 if any failed.
#   run_ctest.sh [--source REPO] [-j N] [--timeout S] [PATTERN]   (PATTERN: a grep -E on names)
# The process-level tests start BINARY_DIR/trainer/codistill-train and read SOURCE_DIR's
# configs/ and scripts/, the build machine's paths (build-info.txt). Where they do not exist
# here they are made: SOURCE_DIR a link to the source checkout (--source; default: the
# folder holding this bundle when it has configs/, else the current folder), BINARY_DIR a
# folder of links to this bundle's programs; and /usr/share/datasets/fashion-mnist (where
# the configs read Fashion-MNIST) a link to this bundle's data/ when it has one. That needs
# write access to their parents (root on the GPU machine); otherwise only the tests that
# need them fail.
# Tests tagged [cuda] report "skipped: no CUDA device" where there is no GPU.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_repo="" jobs=1 timeout_s=900 pattern=""
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_repo="$2"; shift 2 ;;
    -j) jobs="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) pattern="$1"; shift ;;
  esac
done
# shellcheck source=/dev/null
source "$here/env.sh"
src="$(sed -n 's/^source_dir=//p' "$here/build-info.txt")"
bin="$(sed -n 's/^binary_dir=//p' "$here/build-info.txt")"
if [ -z "$source_repo" ]; then
  source_repo="$PWD"
  [ -d "$here/../configs" ] && source_repo="$(cd "$here/.." && pwd)"
fi
if [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")" 2>/dev/null && ln -s "$source_repo" "$src" 2>/dev/null &&
    echo "run_ctest.sh: $src -> $source_repo" ||
    echo "run_ctest.sh: cannot create $src: the process-level tests will fail" >&2
fi
if [ ! -e "$bin/trainer/codistill-train" ]; then
  if mkdir -p "$bin/trainer" "$bin/bench" "$bin/tests" 2>/dev/null; then
    for f in "$here"/bin/codistill-*; do ln -sf "$f" "$bin/trainer/"; done
    for f in "$here"/bin/bench_*; do [ -e "$f" ] && ln -sf "$f" "$bin/bench/"; done
    for f in "$here"/bin/test_* "$here"/bin/*_ranks; do [ -e "$f" ] && ln -sf "$f" "$bin/tests/"; done
    echo "run_ctest.sh: $bin/{trainer,bench,tests} -> links into $here/bin"
  else
    echo "run_ctest.sh: cannot create $bin: the process-level tests will fail" >&2
  fi
fi
fm=/usr/share/datasets/fashion-mnist  # configs/fmnist_*.yaml read it there
if [ ! -e "$fm" ] && [ -d "$here/data/fashion-mnist" ]; then
  mkdir -p "$(dirname "$fm")" 2>/dev/null && ln -s "$here/data/fashion-mnist" "$fm" 2>/dev/null &&
    echo "run_ctest.sh: $fm -> $here/data/fashion-mnist" ||
    echo "run_ctest.sh: cannot create $fm: tests that read Fashion-MNIST will fail" >&2
fi
tests=()
for f in "$here"/bin/test_*; do
  [ -x "$f" ] || continue
  [ -n "$pattern" ] && ! basename "$f" | grep -qE "$pattern" && continue
  tests+=("$f")
done
[ ${#tests[@]} -gt 0 ] || { echo "run_ctest.sh: no test executable here" >&2; exit 2; }
logs="$(mktemp -d)"
one() {  # one test executable in its own scratch folder; prints its summary line
  local t="$1" name rc start secs skipped work
  name="$(basename "$t")"
  work="$(mktemp -d)"
  start=$(date +%s%N)
  (cd "$work" && timeout "$timeout_s" "$t" >"$logs/$name.log" 2>&1)
  rc=$?
  secs=$(( ($(date +%s%N) - start) / 1000000 ))
  secs="$((secs / 1000)).$(( (secs % 1000) / 100 ))"
  skipped=$(grep -c "skipped: no CUDA device" "$logs/$name.log")
  rm -rf "$work"
  printf '%-44s %-7s %7ss  %s\n' "$name" "$([ $rc -eq 0 ] && echo passed || echo FAILED)" "$secs" \
    "$(tail -n 3 "$logs/$name.log" | grep -E 'test cases|passed' | tail -n 1)$([ "$skipped" -gt 0 ] && echo " ($skipped cuda skips)")"
  return $rc
}
export -f one
export logs timeout_s
printf '%s\n' "${tests[@]}" | xargs -P "$jobs" -I{} bash -c 'one "$1"' _ {} | tee "$logs/summary.txt"
failed=$(grep -c " FAILED " "$logs/summary.txt")
echo "run_ctest.sh: ${#tests[@]} test executables, $failed failed (logs: $logs)"
for f in $(grep " FAILED " "$logs/summary.txt" | awk '{print $1}'); do
  echo "---- $f (last lines)"; tail -n 25 "$logs/$f.log"
done
[ "$failed" -eq 0 ]
EOF
chmod +x "$out/run_ctest.sh"

# ---- sizes -------------------------------------------------------------------------------------
echo "bundle: $out"
echo "  bin:   $(ls "$out/bin" | wc -l) programs, $(du -sh "$out/bin" | cut -f1)"
echo "  lib:   ${#bundled[@]} libraries, $(du -sh "$out/lib" | cut -f1)"
[ -d "$out/data" ] && echo "  data:  $(du -sh "$out/data" | cut -f1)"
[ -d "$out/wheels" ] && echo "  wheels: $(ls "$out/wheels" | tr '\n' ' ')$(du -sh "$out/wheels" | cut -f1)"
[ ${#host[@]} -gt 0 ] && echo "  left to the host (CUDA_MAX_MB=$cuda_max_mb): ${!host[*]} (OUT/env.sh finds them)"
echo "  total: $(du -sh "$out" | cut -f1); target needs glibc >= $(newest GLIBC_ | sed 's/GLIBC_//'), libstdc++ with $(newest GLIBCXX_)"
if [ "$tar" = 1 ]; then
  tar -C "$(dirname "$out")" --exclude="$(basename "$out")/data" -cf - "$(basename "$out")" | xz -T0 -6 >"$out.tar.xz"
  echo "  $out.tar.xz: $(du -sh "$out.tar.xz" | cut -f1) (all but the data)"
  rm -f "$out-data.tar" "$out-data.tar.xz"
  if [ -d "$out/data" ]; then
    # The idx files decompressed, then xz: 4 MB less than the gzip files as they are (the
    # device tool carries 64 MiB); the target gzips them again (bench/run_gpu_session.sh).
    stage_dir="$(mktemp -d)"
    cp -r "$out/data" "$stage_dir/data"
    gunzip "$stage_dir"/data/fashion-mnist/*.gz 2>/dev/null || true
    tar -C "$stage_dir" --transform "s|^data|$(basename "$out")/data|" -cf - data | xz -T0 -9 >"$out-data.tar.xz"
    rm -rf "$stage_dir"
    echo "  $out-data.tar.xz: $(du -sh "$out-data.tar.xz" | cut -f1) (the data, idx files uncompressed: for the training benchmark and the tests that read Fashion-MNIST; gzip them after unpacking)"
  fi
fi
