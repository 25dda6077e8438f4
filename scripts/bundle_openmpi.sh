#!/usr/bin/env bash
# Adds this machine's OpenMPI runtime to a bundle (scripts/bundle.sh calls it), so that the
# mpi and nccl groups' process tests run where OpenMPI is not installed (the GPU machine):
# mpirun/orted, the MCA components OpenMPI opens at run time, its help texts, and the shared
# libraries they need that the bundle does not hold yet, under OUT/openmpi, laid out as
# OpenMPI's own install prefix (/usr on Debian) so that OPAL_PREFIX=OUT/openmpi relocates it
# (OUT/env.sh sets it). The programs link libmpi from OUT/lib; everything here finds its
# libraries through an rpath, not LD_LIBRARY_PATH, which would also reach other programs
# (PyTorch's) run beside them.
#   scripts/bundle_openmpi.sh OUT
# Left out: the components for networks a one-node GPU machine has no use for and whose
# libraries are large (UCX, libfabric/OFI, PSM/PSM2, InfiniBand verbs) and OpenSHMEM's.
# OpenMPI then prints nothing about them (they are not there to fail to load).
set -euo pipefail
out="${1:?usage: bundle_openmpi.sh OUT (a bundle made by scripts/bundle.sh)}"
out="$(cd "$out" && pwd)"
command -v ompi_info >/dev/null || { echo "bundle_openmpi.sh: no ompi_info: OpenMPI is not installed here" >&2; exit 1; }
info() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1:\(.*\)/\1/p"; }
prefix="$(info prefix)" bindir="$(info bindir)" pkglibdir="$(info pkglibdir)" pkgdatadir="$(info pkgdatadir)"
for d in "$bindir" "$pkglibdir" "$pkgdatadir"; do
  case "$d" in "$prefix"/*) ;; *) echo "bundle_openmpi.sh: $d is not under OpenMPI's prefix $prefix: cannot relocate" >&2; exit 1 ;; esac
done
dest="$out/openmpi"
rm -rf "$dest"
mkdir -p "$dest/lib" "$dest${bindir#"$prefix"}" "$(dirname "$dest${pkglibdir#"$prefix"}")" "$(dirname "$dest${pkgdatadir#"$prefix"}")"

# mpirun is orterun; mpiexec and mpirun are its names.
cp -L "$bindir/orterun" "$bindir/orted" "$dest${bindir#"$prefix"}/"
ln -s orterun "$dest${bindir#"$prefix"}/mpirun"
ln -s orterun "$dest${bindir#"$prefix"}/mpiexec"
cp -a "$pkgdatadir" "$dest${pkgdatadir#"$prefix"}"
mkdir -p "$dest${pkglibdir#"$prefix"}"
for f in "$pkglibdir"/*.so; do
  case "$(basename "$f")" in
    *ucx*|*ofi*|*psm*|*openib*|*verbs*|*spml*|*sshmem*|*scoll*|*memheap*|*atomic*) continue ;;
  esac
  cp -L "$f" "$dest${pkglibdir#"$prefix"}/"
done
# PMIx (external on Debian) keeps its help texts and its parameter file (which silences a
# warning about compression) under its own prefix: OUT/openmpi/pmix, relocated by PMIX_PREFIX.
pmix_share="$(dirname "$(readlink -f "$(ldconfig -p | awk '/libpmix\.so\.2 /{print $NF; exit}')")")/../share"
[ -d "$pmix_share" ] && mkdir -p "$dest/pmix" && cp -a "$pmix_share" "$dest/pmix/share"

# Their libraries: those the bundle has (OUT/lib) stay there; the rest are copied to
# dest/lib; glibc, libstdc++ and libgcc_s are left to the target as for the programs.
elves=("$dest${bindir#"$prefix"}/orterun" "$dest${bindir#"$prefix"}/orted" "$dest${pkglibdir#"$prefix"}"/*.so)
while read -r soname path; do
  case "$soname" in
    linux-vdso.so*|ld-linux*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libutil.so.*|libresolv.so.*) continue ;;
    libstdc++.so.*|libgcc_s.so.*|libcuda.so*|libnvidia-*) continue ;;
  esac
  [ -e "$out/lib/$soname" ] || [ -e "$dest/lib/$soname" ] && continue
  cp -L "$path" "$dest/lib/$soname"
  chmod u+w "$dest/lib/$soname"
done < <(for e in "${elves[@]}"; do ldd "$e"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
strip --strip-unneeded "${elves[@]}" "$dest"/lib/*.so* 2>/dev/null || true
# rpath: dest/lib, then OUT/lib (libmpi, libopen-pal, libopen-rte, hwloc, libevent...).
rel() { realpath --relative-to="$1" "$2"; }
for e in "${elves[@]}" "$dest"/lib/*.so*; do
  [ -f "$e" ] || continue
  d="$(dirname "$e")"
  patchelf --set-rpath "\$ORIGIN/$(rel "$d" "$dest/lib"):\$ORIGIN/$(rel "$d" "$out/lib")" "$e"
done
# OpenMPI opens libmpi's siblings by name too: the bundle's copies must be found from dest.
for l in libmpi.so.40 libopen-rte.so.40 libopen-pal.so.40; do
  [ -e "$out/lib/$l" ] || cp -L "$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')" "$out/lib/$l"
done
# The check: every library of every piece resolves (env -i: no LD_LIBRARY_PATH).
bad=0
for e in "${elves[@]}"; do
  missing="$(env -i PATH=/usr/bin:/bin ldd "$e" 2>/dev/null | awk '$3 == "not" {print $1}')"
  [ -z "$missing" ] || { echo "bundle_openmpi.sh: $(basename "$e") needs $missing, not found" >&2; bad=1; }
done
[ "$bad" = 0 ] || exit 1
echo "  openmpi: $(ompi_info --version 2>/dev/null | head -n 1 | sed 's/^.*v/v/'), $(ls "$dest${pkglibdir#"$prefix"}" | wc -l) components, $(du -sh "$dest" | cut -f1) (OPAL_PREFIX=OUT/openmpi)"
