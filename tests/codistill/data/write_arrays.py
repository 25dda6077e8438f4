#!/usr/bin/env python3
"""Writes a labelled image dataset in every container data.kind arrays reads, for the tests.

    write_arrays.py fmnist OUT      Fashion-MNIST's IDX files (Debian's package) as
                                    OUT/npy/{train,test}_{x,y}.npy, OUT/stored.npz,
                                    OUT/deflated.npz, OUT/contiguous.h5, OUT/chunked.h5
    write_arrays.py rgb OUT SEED    a small random uint8 [N, H, W, C] set, the same pixels in
                                    nhwc (OUT/nhwc/) and nchw (OUT/nchw/) .npy folders, and
                                    as float16 (OUT/f16/) and float64 (OUT/f64/)

Needs NumPy and h5py (Debian's python3-numpy and python3-h5py: scripts/setup.sh)."""
import gzip
import os
import sys

import numpy as np

FMNIST = "/usr/share/datasets/fashion-mnist"


def read_idx(path, header):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    return np.frombuffer(raw, dtype=np.uint8, offset=header)


def fmnist(out):
    import h5py
    arrays = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(os.path.join(FMNIST, prefix + "-images-idx3-ubyte.gz"), 16).reshape(-1, 28, 28)
        y = read_idx(os.path.join(FMNIST, prefix + "-labels-idx1-ubyte.gz"), 8).astype(np.int64)
        arrays[split + "_x"], arrays[split + "_y"] = x, y
    os.makedirs(os.path.join(out, "npy"), exist_ok=True)
    for key, a in arrays.items():
        np.save(os.path.join(out, "npy", key + ".npy"), a)
    np.savez(os.path.join(out, "stored.npz"), **arrays)
    np.savez_compressed(os.path.join(out, "deflated.npz"), **arrays)
    with h5py.File(os.path.join(out, "contiguous.h5"), "w") as f:
        for key, a in arrays.items():
            f.create_dataset(key, data=a)
    with h5py.File(os.path.join(out, "chunked.h5"), "w") as f:
        for key, a in arrays.items():
            f.create_dataset(key, data=a, chunks=True, compression="gzip")


def rgb(out, seed):
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, n in (("train", 64), ("test", 16)):
        arrays[split + "_x"] = rng.integers(0, 256, size=(n, 5, 7, 3), dtype=np.uint8)
        arrays[split + "_y"] = rng.integers(0, 4, size=n).astype(np.int32)
    variants = {
        "nhwc": lambda k, a: a,
        "nchw": lambda k, a: np.ascontiguousarray(a.transpose(0, 3, 1, 2)) if k.endswith("_x") else a,
        "f16": lambda k, a: a.astype(np.float16) if k.endswith("_x") else a,
        "f64": lambda k, a: a.astype(np.float64) if k.endswith("_x") else a,
    }
    for name, f in variants.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        for key, a in arrays.items():
            np.save(os.path.join(out, name, key + ".npy"), f(key, a))


if __name__ == "__main__":
    if sys.argv[1] == "fmnist":
        fmnist(sys.argv[2])
    elif sys.argv[1] == "rgb":
        rgb(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("write_arrays.py: unknown set " + sys.argv[1])
