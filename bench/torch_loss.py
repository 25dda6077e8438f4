#!/usr/bin/python3
"""PyTorch (CPU) reference for the loss benchmark (bench/run_loss_bench.sh).

The same math as codistill's fused distillation loss (DESIGN.md section 6), written the
way a PyTorch user would, forward and backward:
    log_p_T = log_softmax(z / T); q = mean_k softmax(t_k / T)
    loss = h * cross_entropy(z, y) + a * T^2 * kl_div(log_p_T, q, 'batchmean')
    loss.backward()  ->  dz
at the shapes of bench/kernels/bench_loss.cpp (N=4096 V=1000 K=1; N=4096 V=1000 K=4;
N=1024 V=32768 K=1; T=2, a=1, h=1, float32), with the same timing: warm-up calls, then
the median over repeats of one forward + backward each.

--check DIR only recomputes the shared input written by `bench_loss --dump DIR` and
compares loss and gradient with codistill's (exit status 1 on a mismatch), no timing.
--only I times the I-th shape alone (1-based), as bench_loss --only does.
Run with Debian's interpreter: /usr/bin/python3 bench/torch_loss.py [--json PATH].
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

SHAPES = [(4096, 1000, 1), (4096, 1000, 4), (1024, 32768, 1)]


def loss_fn(z, teachers, y, T, a, h):
    """Means over the rows whose label is not -1 (the ignored rows are dropped first)."""
    keep = y != -1
    if not bool(keep.all()):  # the timed shapes have no ignored row: no gather there
        z, teachers, y = z[keep], [t[keep] for t in teachers], y[keep]
    ce = F.cross_entropy(z, y)
    log_p_t = F.log_softmax(z / T, dim=1)
    q = torch.stack([F.softmax(t / T, dim=1) for t in teachers]).mean(0)
    distill = F.kl_div(log_p_t, q, reduction="batchmean") * (T * T)
    return h * ce + a * distill, ce, distill


def time_shape(N, V, K, T, a, h, warmup, repeats, seed):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(N, V, generator=g) * 2.0).requires_grad_()
    teachers = [torch.randn(N, V, generator=g) * 2.0 for _ in range(K)]
    y = torch.randint(0, V, (N,), generator=g)

    def step():
        z.grad = None
        loss, _, _ = loss_fn(z, teachers, y, T, a, h)
        loss.backward()
        return loss

    for _ in range(warmup):
        step()
    ms = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        loss = step()
        ms.append((time.perf_counter() - t0) * 1e3)
    return {"N": N, "V": V, "K": K, "temperature": T, "median_ms": statistics.median(ms),
            "min_ms": min(ms), "repeats": repeats, "loss": float(loss)}


def check(path):
    meta = json.load(open(f"{path}/meta.json"))
    N, V, K = meta["N"], meta["V"], meta["K"]
    z = torch.from_numpy(np.fromfile(f"{path}/student.f32", dtype=np.float32).reshape(N, V))
    z64 = z.double().requires_grad_()
    teachers = [torch.from_numpy(np.fromfile(f"{path}/teacher{k}.f32", dtype=np.float32)
                                 .reshape(N, V)).double() for k in range(K)]
    y = torch.from_numpy(np.fromfile(f"{path}/labels.i32", dtype=np.int32).astype(np.int64))
    ours_grad = np.fromfile(f"{path}/grad.f32", dtype=np.float32).reshape(N, V)
    loss, ce, distill = loss_fn(z64, teachers, y, meta["temperature"], meta["weight"],
                                meta["hard_weight"])
    loss.backward()
    grad = z64.grad.numpy()
    loss_err = abs(loss.item() - meta["loss"]) / abs(loss.item())
    grad_err = float(np.abs(ours_grad - grad).max() / np.abs(grad).max())
    ok = loss_err < 1e-5 and grad_err < 1e-5
    print(f"check (N={N} V={V} K={K} T={meta['temperature']}, {N - meta['rows']} rows ignored): "
          f"loss torch {loss.item():.9f} ours {meta['loss']:.9f} rel err {loss_err:.2e}; "
          f"ce {ce.item():.6f}/{meta['ce']:.6f} distill {distill.item():.6f}/{meta['distill']:.6f}; "
          f"grad max err / max |grad| {grad_err:.2e} -> {'OK' if ok else 'MISMATCH'}")
    return ok, loss_err, grad_err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--check", metavar="DIR", help="compare with bench_loss --dump DIR")
    ap.add_argument("--only", type=int, metavar="I", help="time the I-th shape alone (1-based)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    doc = {"benchmark": "loss_cpu", "impl": "pytorch", "torch": torch.__version__,
           "threads": args.threads, "warmup": args.warmup, "dtype": "float32"}
    if args.check:
        ok, loss_err, grad_err = check(args.check)
        doc["check"] = {"ok": ok, "loss_rel_err": loss_err, "grad_rel_err": grad_err}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=2)
        return 0 if ok else 1
    print(f"pytorch {torch.__version__} fwd+bwd, float32, T=2 a=1 h=1, {args.threads} threads, "
          f"median of {args.repeats}")
    print(f"{'N':>6} {'V':>6} {'K':>2} {'torch ms':>11} {'loss':>12}")
    results = []
    for i, (N, V, K) in enumerate(SHAPES):
        if args.only is not None and args.only != i + 1:
            continue
        r = time_shape(N, V, K, 2.0, 1.0, 1.0, args.warmup, args.repeats, seed=100 + i)
        results.append(r)
        print(f"{N:>6} {V:>6} {K:>2} {r['median_ms']:>11.3f} {r['loss']:>12.6f}")
    doc["results"] = results
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
