#!/usr/bin/python3
"""Poisons codistill checkpoints in place and recomputes their content digest, so that each
stays a valid checkpoint (it verifies, loads and fits) whose model is broken: the peer that
diverged, was misconfigured or trained on broken data, which the teacher gate
(codistill.gate, docs/training.md) must refuse.

    scripts/experiments/poison_checkpoint.py KIND FILE [FILE...] [--param PATH] [--seed N]

KIND:
  scramble  the classifier's weights replaced by Gaussian noise of 3x their std
  rotate    the classifier's rows rolled by one: class k is predicted as k + 1, confidently
  nan       one NaN in the classifier's weights
  untrained every parameter replaced by Gaussian noise of its own std (an untrained model)
The classifier is --param (a dataset path such as params/fc3/weight); by default the 2-D
parameter with the fewest rows (the MLP's and CNN's last layer: classes x features). Its
bias, when there is one beside it, is rolled/scrambled with it. Exit 2 on a bad argument or
an unreadable file."""
import argparse
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checkpoint_digest import content_digest  # noqa: E402

KINDS = ("scramble", "rotate", "nan", "untrained")


def params(f):
    out = []
    f["params"].visititems(lambda rel, obj: out.append("params/" + rel) if isinstance(obj, h5py.Dataset) else None)
    return out


def classifier(f, given):
    if given:
        if given not in f:
            raise KeyError("no dataset %r (the parameters: %s)" % (given, ", ".join(params(f))))
        return given
    two_d = [p for p in params(f) if f[p].ndim == 2]
    if not two_d:
        raise KeyError("no 2-D parameter to poison; name one with --param")
    return min(two_d, key=lambda p: (f[p].shape[0], p))


def poison(f, kind, param, rng):
    if kind == "untrained":
        for p in params(f):
            x = f[p][()]
            f[p][...] = rng.standard_normal(x.shape).astype(x.dtype) * (x.std() or 1.0)
        return
    w = f[param][()]
    bias = param.rsplit("/", 1)[0] + "/bias"
    b = f[bias][()] if bias in f else None
    if kind == "scramble":
        f[param][...] = rng.standard_normal(w.shape).astype(w.dtype) * 3 * w.std()
        if b is not None:
            f[bias][...] = rng.standard_normal(b.shape).astype(b.dtype) * 3 * (b.std() or 1.0)
    elif kind == "rotate":
        f[param][...] = np.roll(w, 1, axis=0)
        if b is not None:
            f[bias][...] = np.roll(b, 1, axis=0)
    elif kind == "nan":
        w.flat[0] = np.nan
        f[param][...] = w


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--param", default="")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    for path in a.files:
        try:
            with h5py.File(path, "r+", locking=False) as f:
                param = classifier(f, a.param)
                poison(f, a.kind, param, rng)
                digest, _ = content_digest(f)
                f.attrs["content_digest"] = digest
        except (OSError, KeyError, ValueError) as e:
            print("%s: cannot poison: %s" % (path, e), file=sys.stderr)
            return 2
        print("%s: %s (%s), digest %s" % (path, a.kind, param if a.kind != "untrained" else "every parameter", digest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
