#!/usr/bin/python3
"""Recomputes the content digest of codistill checkpoints in Python, independently of the
C++ library (docs/checkpoint-format.md, "Content digest"): h5py reads the datasets, the
`xxhash` package (Debian python3-xxhash) hashes the byte stream the format defines.

    scripts/checkpoint_digest.py FILE [FILE...]

Prints, per file, the stored and the computed digest and the algorithm; exits 1 when any
differs, 2 when a file cannot be read as a checkpoint."""
import struct
import sys

import h5py
import numpy as np
import xxhash

# content_digest_algorithm -> hash constructor; files without the attribute are XXH64.
ALGORITHMS = {"xxh3-64": xxhash.xxh3_64, "xxh64": xxhash.xxh64}
TYPE_NAMES = {"f4": "float32", "f8": "float64", "i8": "int64", "u8": "uint64"}
# bfloat16 (teacher files' /params and /buffers): an HDF5 custom float, sign at bit 15, an
# 8-bit exponent at 7, a 7-bit mantissa at 0; hashed as its raw 16-bit little-endian words.
BF16_FIELDS = (15, 7, 8, 0, 7)
SECTIONS = ("params", "buffers", "optimizer", "state")


def text(value):
    """Attribute strings: fixed-length ones come back as bytes, variable-length as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def algorithm(f):
    return text(f.attrs["content_digest_algorithm"]) if "content_digest_algorithm" in f.attrs else "xxh64"


def is_bf16(tid):
    return (isinstance(tid, h5py.h5t.TypeFloatID) and tid.get_size() == 2 and tid.get_fields() == BF16_FIELDS
            and tid.get_order() == h5py.h5t.ORDER_LE)


def read_dataset(dset):
    """The dataset's values as the digest takes them, and its element type's name."""
    tid = dset.id.get_type()
    if is_bf16(tid):  # raw words: numpy has no bfloat16, and h5py would convert them
        data = np.empty(dset.shape, dtype="<u2")
        if data.size:
            dset.id.read(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=tid)
        return data, "bfloat16"
    data = np.asarray(dset[()])
    kind = data.dtype.str[1:]
    if kind not in TYPE_NAMES:
        raise ValueError("%s: element type %s is not one the format allows" % (dset.name, data.dtype))
    return data, TYPE_NAMES[kind]


def content_digest(f):
    name = algorithm(f)
    if name not in ALGORITHMS:
        raise ValueError("unknown content_digest_algorithm %r (valid: %s)" % (name, ", ".join(sorted(ALGORITHMS))))
    paths = []
    for section in SECTIONS:
        if section in f:  # /buffers only exists with buffers in it
            f[section].visititems(
                lambda rel, obj, s=section: paths.append("/%s/%s" % (s, rel)) if isinstance(obj, h5py.Dataset) else None)
    h = ALGORITHMS[name]()
    for path in sorted(paths, key=lambda p: p.encode()):  # bytewise order of the full paths
        data, type_name = read_dataset(f[path])
        h.update(path.encode() + b"\0" + type_name.encode() + b"\0")
        h.update(struct.pack("<Q", data.ndim) + b"".join(struct.pack("<Q", d) for d in data.shape))
        h.update(np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest(), name


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    status = 0
    for path in paths:
        try:
            with h5py.File(path, "r", locking=False) as f:
                stored = text(f.attrs["content_digest"])
                computed, name = content_digest(f)
        except (OSError, KeyError, ValueError) as e:
            print("%s: cannot check: %s" % (path, e), file=sys.stderr)
            status = max(status, 2)
            continue
        ok = stored == computed
        print("%s: %s stored %s computed %s%s" % (path, name, stored, computed, "" if ok else "  MISMATCH"))
        if not ok:
            status = max(status, 1)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
