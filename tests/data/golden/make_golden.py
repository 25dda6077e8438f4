#!/usr/bin/python3
"""Writes tests/data/golden/mlp_sgd3.h5: PyTorch's reference numbers for test_golden.

Three SGD steps of fmnist_mlp (Flatten, 784-256-256-10, ReLU) from the codistill checkpoint
mlp_init.h5, on Fashion-MNIST training examples 0..383 in order (128 a step), with
torch.optim.SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4) at a constant
learning rate, for two losses of DESIGN.md section 6:
  hard     h * CE(y, softmax(z))                                      (h = 1, no teacher)
  distill  h * CE + a * T^2 * KL(q_T || softmax(z / T)),  q_T = softmax(t / T)
           (h = 1, a = 1, T = 2; t = the logits of mlp_teacher.h5 on the same batch)
The file holds, per variant, the loss, ce and distill of each step (float64) and every
parameter after step 3 (float32), plus root attributes saying how it was made.

Inputs are normalized as codistill's data.normalize "standard" does
(codistill/data/dataset.cpp): raw pixel values 0..255 (not divided by 255), minus the mean,
divided by the population standard deviation, both scalars over every pixel of the whole
raw training split, computed in double; the result is rounded to float32.

Run with Debian's Python (torch, h5py, numpy):  /usr/bin/python3 tests/data/golden/make_golden.py
It refuses to replace an existing mlp_sgd3.h5 unless given --force.
"""
import argparse
import gzip
import hashlib
import os
import struct
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = "/usr/share/datasets/fashion-mnist"
LR, MOMENTUM, NESTEROV, WEIGHT_DECAY = 0.05, 0.9, True, 1e-4
BATCH, STEPS = 128, 3
VARIANTS = {  # name: (hard_weight h, weight a, temperature T, uses the teacher)
    "hard": (1.0, 0.0, 1.0, False),
    "distill": (1.0, 1.0, 2.0, True),
}
PARAMS = ["fc1/weight", "fc1/bias", "fc2/weight", "fc2/bias", "fc3/weight", "fc3/bias"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">i", raw[:4])
    ndim = magic & 0xFF
    assert magic >> 8 == 0x08, f"{path}: not unsigned-byte IDX data"
    dims = struct.unpack(">" + "i" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_batches():
    images = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
    assert images.shape == (60000, 28, 28) and labels.shape == (60000,)
    raw = images.astype(np.float64)
    mean = raw.sum() / raw.size  # a sum of integers: exact in any order
    # Population std with dataset.cpp's running double sum of squares, term by term in
    # order (cumsum is sequential; numpy's sum is pairwise and differs in the 11th digit).
    sq = 0.0
    flat = raw.reshape(-1)
    for i in range(0, flat.size, 1 << 20):
        sq = np.cumsum(np.concatenate(([sq], (flat[i:i + (1 << 20)] - mean) ** 2)))[-1]
    std = np.sqrt(sq / raw.size)
    n = STEPS * BATCH
    x = ((raw[:n] - mean) * (1.0 / std)).astype(np.float32).reshape(n, 1, 28, 28)
    y = labels[:n].astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y), mean, std


def mlp(dtype):
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10)).to(dtype)


def load_checkpoint(path, dtype):
    """The model of a codistill checkpoint (format v1): /params/fcK/{weight,bias}."""
    model = mlp(dtype)
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    with h5py.File(path, "r") as f:
        fmt = f.attrs["format"]  # bytes since checkpoints store fixed-length strings
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        assert fmt == "codistill.checkpoint" and f.attrs["format_version"] == 1, path
        assert sorted(f["params"].keys()) == ["fc1", "fc2", "fc3"], path
        with torch.no_grad():
            for k, lin in enumerate(linears, start=1):
                w, b = f[f"params/fc{k}/weight"][...], f[f"params/fc{k}/bias"][...]
                assert w.dtype == np.float32 and w.shape == tuple(lin.weight.shape), (path, k, w.shape)
                lin.weight.copy_(torch.from_numpy(w))
                lin.bias.copy_(torch.from_numpy(b))
        norm = f["state/data/normalization"][...] if "state/data/normalization" in f else None
    return model, norm


def named_params(model):
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    out = {}
    for k, lin in enumerate(linears, start=1):
        out[f"fc{k}/weight"] = lin.weight.detach()
        out[f"fc{k}/bias"] = lin.bias.detach()
    return out


def loss_terms(z, y, t, h, a, T):
    """(loss, ce, distill) of DESIGN.md section 6 for logits z, labels y, teacher logits t."""
    ce = F.cross_entropy(z, y)
    if t is None:
        return h * ce, ce, torch.zeros((), dtype=z.dtype)
    q = F.softmax(t / T, dim=1)
    # mean over rows of T^2 * sum_v q (log q - log softmax(z / T))
    distill = T * T * F.kl_div(F.log_softmax(z / T, dim=1), q, reduction="batchmean")
    return h * ce + a * distill, ce, distill


def run(variant, x, y, dtype):
    h, a, T, use_teacher = VARIANTS[variant]
    model, _ = load_checkpoint(os.path.join(HERE, "mlp_init.h5"), dtype)
    teacher = load_checkpoint(os.path.join(HERE, "mlp_teacher.h5"), dtype)[0] if use_teacher else None
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, nesterov=NESTEROV,
                          weight_decay=WEIGHT_DECAY)
    losses = {"loss": [], "ce": [], "distill": [], "loss_f32": [], "ce_f32": [], "distill_f32": []}
    for s in range(STEPS):
        xb, yb = x[s * BATCH:(s + 1) * BATCH].to(dtype), y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        z = model(xb)
        with torch.no_grad():
            t = teacher(xb) if teacher is not None else None
        loss, ce, distill = loss_terms(z, yb, t, h, a, T)
        loss.backward()
        opt.step()
        # The recorded values: the same terms evaluated in float64 from these logits
        # (the float32 KL of two close distributions loses ~1e-5 of itself to cancellation).
        with torch.no_grad():
            exact = loss_terms(z.double(), yb, None if t is None else t.double(), h, a, T)
        for key, v, e in zip(("loss", "ce", "distill"), (loss, ce, distill), exact):
            losses[key].append(float(e))
            losses[key + "_f32"].append(float(v))
    return losses, named_params(model)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "mlp_sgd3.h5"))
    ap.add_argument("--force", action="store_true", help="replace an existing output file")
    args = ap.parse_args()
    if os.path.exists(args.out) and not args.force:
        sys.exit(f"{args.out} exists (use --force to replace it)")
    torch.manual_seed(0)  # nothing here is random; set anyway
    torch.set_num_threads(1)

    x, y, mean, std = load_batches()
    _, stored = load_checkpoint(os.path.join(HERE, "mlp_init.h5"), torch.float32)
    if stored is not None:  # the trainer's own statistics, stored with the checkpoint
        assert stored[0] == mean and stored[1] == std, (stored, mean, std)
    print(f"normalization: mean {mean!r}, std {std!r} (checkpoint: {stored})")

    results = {v: run(v, x, y, torch.float32) for v in VARIANTS}
    # The same in float64, printed only: how far float32 arithmetic alone moves the numbers.
    init64 = named_params(load_checkpoint(os.path.join(HERE, "mlp_init.h5"), torch.float64)[0])
    for v, (losses, params) in results.items():
        l64, p64 = run(v, x, y, torch.float64)
        for key in losses:
            print(f"{v:8s} {key:8s} float32 {np.array(losses[key])}  rel. diff to float64 "
                  f"{np.abs(np.array(losses[key]) - l64[key]).max() / max(np.abs(l64[key]).max(), 1e-300):.2e}")
        for name in PARAMS:
            ref = p64[name].numpy()
            err = np.abs(params[name].numpy().astype(np.float64) - ref).max()
            upd = np.sqrt(((ref - init64[name].numpy()) ** 2).mean())
            rms = np.sqrt((ref ** 2).mean())
            print(f"{v:8s} {name:11s} max|f32 - f64| / rms {err / rms:.2e}   (update rms / param rms {upd / rms:.2e})")

    tmp = args.out + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["made_by"] = "tests/data/golden/make_golden.py (PyTorch, float32, CPU, 1 thread)"
        f.attrs["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["numpy_version"] = np.__version__
        f.attrs["h5py_version"] = h5py.__version__
        f.attrs["init_checkpoint"] = "mlp_init.h5 sha256 " + sha256(os.path.join(HERE, "mlp_init.h5"))
        f.attrs["teacher_checkpoint"] = "mlp_teacher.h5 sha256 " + sha256(os.path.join(HERE, "mlp_teacher.h5"))
        f.attrs["data"] = ("Fashion-MNIST training examples 0..383 in order, 128 a step, from " + DATA +
                           "; x = (raw - data_mean) / data_std in float64, then float32")
        f.attrs["optimizer"] = (f"torch.optim.SGD(lr={LR}, momentum={MOMENTUM}, nesterov={NESTEROV}, "
                                f"weight_decay={WEIGHT_DECAY}), constant learning rate")
        f.attrs["data_mean"], f.attrs["data_std"] = float(mean), float(std)
        f.attrs["lr"], f.attrs["momentum"], f.attrs["weight_decay"] = LR, MOMENTUM, WEIGHT_DECAY
        f.attrs["nesterov"] = np.int64(NESTEROV)
        f.attrs["batch_size"], f.attrs["steps"] = np.int64(BATCH), np.int64(STEPS)
        for v, (losses, params) in results.items():
            h, a, T, use_teacher = VARIANTS[v]
            g = f.create_group(v)
            g.attrs["hard_weight"], g.attrs["weight"], g.attrs["temperature"] = h, a, T
            g.attrs["teacher"] = "mlp_teacher.h5" if use_teacher else ""
            for key, vals in losses.items():
                g[key] = np.array(vals, dtype=np.float64)
            for name in PARAMS:
                g[f"params/{name}"] = params[name].numpy().astype(np.float32)
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
