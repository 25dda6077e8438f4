#!/usr/bin/env bash
# Installs, with apt-get, whatever this project needs and this machine lacks.
# Idempotent: when everything is present it prints nothing and changes nothing.
#   scripts/setup.sh           build + test dependencies
#   scripts/setup.sh --bench   also the side-by-side benchmark references: PyTorch (Debian's)
#                              and JAX/XLA on CPU from PyPI in the virtual environment
#                              .venv-bench/ at the repository root (ignored by git)
#   scripts/setup.sh --tools   also what the after-training tools need (export, plots,
#                              TensorBoard): Debian's torch, h5py, matplotlib and yaml, and from
#                              PyPI onnxruntime, safetensors and tensorboard in the virtual
#                              environment .venv-tools/ (it sees Debian's packages),
#                              tokenizers, against which prepare-text's tokenizer.json is tested,
#                              and lizard, which scripts/lib/check_function_length.py measures with
#   scripts/setup.sh --slurm   also Slurm and munge (Debian's slurm-wlm 22.05, munge), for the
#                              test that runs a real one-node cluster (scripts/slurm/local_cluster.sh).
#                              Only the packages: their services are not enabled or started here
#                              (the test starts its own daemons, with their own key and config).
# Environment for --bench: JAX_VERSION (default 0.10.2, the newest for Python 3.11).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config zlib1g-dev
  libminizip-dev  # data.kind arrays: .npz files are zip archives
  python3-numpy python3-h5py  # the data tests write .npy, .npz and HDF5 arrays
  libhdf5-dev hdf5-tools
  libxxhash-dev  # checkpoint content digests (XXH3-64)
  libpcre2-dev  # GPT-2's pre-tokenizer regex for Hugging Face tokenizer.json files
  python3-xxhash  # scripts/checkpoint_digest.py recomputes them in Python
  libyaml-cpp-dev
  libboost-filesystem-dev libboost-program-options-dev libboost-context-dev
  libopenblas-dev
  libdnnl-dev ocl-icd-opencl-dev  # oneDNN: the CPU backend's bf16 matrix products and convolutions (its CMake package needs OpenCL's headers)
  libopenmpi-dev openmpi-bin  # process groups: the MPI kind (codistill/dist/), mpirun in tests
  catch2
  nlohmann-json3-dev libspdlog-dev libfmt-dev
  dataset-fashion-mnist
  python3.11-doc  # the text corpus: its reStructuredText sources (docs/text-data.md)
  python3 gnuplot-nox
  python3-matplotlib  # scripts/plot_run.py (run_demo.sh ends with its picture)
  patchelf  # scripts/bundle.sh (relocatable bundle)
  clang libclang-rt-14-dev libomp-dev  # the sanitized, fuzz and TSan builds (clang, its OpenMP, libFuzzer)
)
bench=0
tools=0
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1; packages+=(python3-torch python3-h5py python3-numpy python3-yaml python3-venv) ;;
    --tools) tools=1; packages+=(python3-torch python3-h5py python3-numpy python3-matplotlib python3-yaml python3-venv) ;;
    --slurm) packages+=(slurm-wlm munge) ;;
    *) echo "setup.sh: unknown argument '$arg' (valid: --bench, --tools, --slurm)" >&2; exit 2 ;;
  esac
done

# JAX/XLA (CPU) for bench/jax_*.py: PyPI's jax[cpu] in a plain virtual environment of
# Debian's interpreter (its own numpy; Debian's torch stays out of it). Nothing is done when
# the pinned versions are already there.
bench_venv() {
  local root venv jax_version yaml_version
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="$root/.venv-bench"
  jax_version="${JAX_VERSION:-0.10.2}"
  yaml_version=6.0.3
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$jax_version" "$yaml_version" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if (version("jax"), version("jaxlib"), version("PyYAML")) == (sys.argv[1], sys.argv[1], sys.argv[2]) else 1)
PY
  then
    return 0
  fi
  echo "setup.sh: creating $venv with jax[cpu]==$jax_version"
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "jax[cpu]==$jax_version" "PyYAML==$yaml_version"
  echo "setup.sh: done"
}

# The after-training tools' PyPI packages (and Hugging Face `tokenizers`, the reference of
# tests/scripts/test_tokenizer_json.py, and `lizard`, the function lengths of
# scripts/lib/check_function_length.py), pinned, in a virtual environment that sees
# Debian's torch/numpy/h5py/matplotlib (--system-site-packages). numpy stays Debian's:
# torch 1.13 is built against numpy 1.x, so the constraint keeps pip from upgrading it.
tools_venv() {
  local root venv
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="$root/.venv-tools"
  local pins=("onnxruntime==1.20.1" "safetensors==0.4.5" "tensorboard==2.18.0" "tokenizers==0.21.0" "lizard==1.24.3")
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if all(version(p.split("==")[0]) == p.split("==")[1] for p in sys.argv[1:]) else 1)
PY
  then
    return 0
  fi
  echo "setup.sh: creating $venv with ${pins[*]}"
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "${pins[@]}" "numpy<2"
  echo "setup.sh: done"
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup.sh: done"
fi
[ "$bench" -eq 1 ] && bench_venv
[ "$tools" -eq 1 ] && tools_venv
exit 0
