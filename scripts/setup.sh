#!/usr/bin/env bash
# Installs, with apt-get, whatever this project needs and this machine lacks.
# Idempotent: when everything is present it prints nothing and changes nothing.
#   scripts/setup.sh           build + test dependencies
#   scripts/setup.sh --bench   also the side-by-side benchmark references (PyTorch CPU)
set -euo pipefail

packages=(
  build-essential cmake pkg-config zlib1g-dev
  libhdf5-dev hdf5-tools
  libyaml-cpp-dev
  libboost-filesystem-dev libboost-program-options-dev
  libopenblas-dev
  catch2
  nlohmann-json3-dev libspdlog-dev libfmt-dev
  dataset-fashion-mnist
  python3 gnuplot-nox
  patchelf  # scripts/bundle.sh (relocatable bundle)
)
for arg in "$@"; do
  case "$arg" in
    --bench) packages+=(python3-torch python3-h5py python3-numpy python3-yaml) ;;
    *) echo "setup.sh: unknown argument '$arg' (valid: --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup.sh: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup.sh: done"
