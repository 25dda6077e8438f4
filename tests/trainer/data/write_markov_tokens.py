#!/usr/bin/env python3
"""Writes token shards of an order-2 Markov chain with a known conditional entropy.

    write_markov_tokens.py OUT VOCAB SEED TRAIN_TOKENS VALID_TOKENS [ALPHA]

Every pair of previous tokens (a, b) has its own next-token distribution, drawn from a
Dirichlet(ALPHA) (default 0.3) over VOCAB tokens, so the best possible next-token loss is the chain's
conditional entropy. One chain is run for TRAIN_TOKENS + VALID_TOKENS tokens; the training
part is cut into two llm.c shards (OUT/llmc/train_000.bin, train_001.bin: 256 int32 header,
magic 20240520, version 1, uint16 tokens), the rest is OUT/llmc/valid_000.bin; the same
tokens go headerless into OUT/raw/ (nanoGPT's uint16 .bin). Prints one JSON line: the
chain's conditional entropy in nats (under its own empirical pair frequencies) and the true
model's loss on the held-out tokens, the floor any model is measured against.

Written with NumPy only (not codistill's writer), so the test also checks the format."""
import json
import os
import sys

import numpy as np


def llmc(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def main(out, vocab, seed, n_train, n_valid, alpha):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(vocab, alpha), size=(vocab, vocab))  # [a, b, next]
    cdf = np.cumsum(probs, axis=2)
    n = n_train + n_valid
    tokens = np.empty(n, dtype=np.int64)
    tokens[:2] = rng.integers(0, vocab, size=2)
    u = rng.random(n)
    for t in range(2, n):
        row = cdf[tokens[t - 2], tokens[t - 1]]
        tokens[t] = min(int(np.searchsorted(row, u[t] * row[-1], side="right")), vocab - 1)
    entropy_per_pair = -(probs * np.log(probs)).sum(axis=2)
    pairs = tokens[:-2] * vocab + tokens[1:-1]
    freq = np.bincount(pairs, minlength=vocab * vocab) / len(pairs)
    entropy = float((freq * entropy_per_pair.reshape(-1)).sum())
    valid = tokens[n_train:]
    floor = float(-np.log(probs[valid[:-2], valid[1:-1], valid[2:]]).mean())
    for fmt in ("llmc", "raw"):
        os.makedirs(os.path.join(out, fmt), exist_ok=True)
    half = n_train // 2
    for name, part in (("train_000", tokens[:half]), ("train_001", tokens[half:n_train]), ("valid_000", valid)):
        llmc(os.path.join(out, "llmc", name + ".bin"), part)
        part.astype(np.uint16).tofile(os.path.join(out, "raw", name + ".bin"))
    print(json.dumps({"vocab": vocab, "alpha": alpha, "entropy": entropy, "valid_floor": floor, "train_tokens": n_train,
                      "valid_tokens": n_valid}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
         float(sys.argv[6]) if len(sys.argv) > 6 else 0.3)
