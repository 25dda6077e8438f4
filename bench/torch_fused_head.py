#!/usr/bin/python3
"""PyTorch (CPU) side of the fused-head benchmark (bench/run_fused_head_bench.sh).

The unfused path a PyTorch user writes for a distillation head: the student's logits
z = F.linear(h, W) and each teacher's t_k = F.linear(h_k, W_k) (no gradient), then the
loss of DESIGN.md section 6 (T = 2, a = 1, h = 1),
    loss = h * cross_entropy(z, y) + a * T^2 * kl_div(log_softmax(z / T), mean_k softmax(t_k / T), 'batchmean')
and loss.backward() to h and W. One shape per process, like bench_fused_head: the median
of --calls calls after --warmup, and the peak memory the same way (VmHWM at the end minus
VmRSS once torch is imported and the inputs exist; the gradients h.grad and W.grad count,
"working" subtracts them).

--check DIR recomputes the small problem that `bench_fused_head --dump DIR` wrote and
compares loss, dh and dW with codistill's (exit 1 on a mismatch); no timing.
Run with Debian's interpreter: /usr/bin/python3 bench/torch_fused_head.py ...
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

T_, A_, H_ = 2.0, 1.0, 1.0


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError("no " + key)


def head_loss(h, W, teachers, y):
    keep = y != -1
    z = F.linear(h, W)
    with torch.no_grad():
        ts = [F.linear(hk, Wk) for hk, Wk in teachers]
    if not bool(keep.all()):
        z, ts, y = z[keep], [t[keep] for t in ts], y[keep]
    ce = F.cross_entropy(z, y)
    if not ts:
        return H_ * ce
    q = torch.stack([F.softmax(t / T_, dim=1) for t in ts]).mean(0)
    distill = F.kl_div(F.log_softmax(z / T_, dim=1), q, reduction="batchmean") * (T_ * T_)
    return H_ * ce + A_ * distill


def check(d):
    N, H, V, K = 37, 24, 1000, 2
    load = lambda name, dt, shape: torch.from_numpy(np.fromfile(f"{d}/{name}", dtype=dt).reshape(shape))
    h = load("h.f32", np.float32, (N, H)).double().requires_grad_()
    W = load("w.f32", np.float32, (V, H)).double().requires_grad_()
    teachers = [(load(f"th{k}.f32", np.float32, (N, H)).double(), load(f"tw{k}.f32", np.float32, (V, H)).double())
                for k in range(K)]
    y = load("labels.i32", np.int32, (N,)).long()
    loss = head_loss(h, W, teachers, y)
    loss.backward()
    ours_loss = float(np.fromfile(f"{d}/loss.f64", dtype=np.float64)[0])
    ours_dh = load("dh.f32", np.float32, (N, H)).double()
    ours_dw = load("dw.f32", np.float32, (V, H)).double()
    rel = lambda a, b: float((a - b).abs().max() / b.abs().max())
    errs = {"loss": abs(ours_loss - float(loss)) / abs(float(loss)), "dh": rel(ours_dh, h.grad), "dW": rel(ours_dw, W.grad)}
    ok = all(e < 1e-4 for e in errs.values())
    print(json.dumps({"check": "ok" if ok else "MISMATCH", "relative_errors": errs, "torch_loss": float(loss),
                      "codistill_loss": ours_loss}))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--N", type=int, default=1024)
    ap.add_argument("--H", type=int, default=768)
    ap.add_argument("--V", type=int, default=32768)
    ap.add_argument("--K", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--check")
    a = ap.parse_args()
    if a.check:
        return check(a.check)
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(1)
    s = 3.0 / a.H ** 0.5
    uni = lambda shape, scale: (torch.rand(shape, generator=g) * 2 - 1) * scale
    h = uni((a.N, a.H), 1.0).requires_grad_()
    W = uni((a.V, a.H), s).requires_grad_()
    teachers = [(uni((a.N, a.H), 1.0), uni((a.V, a.H), s)) for _ in range(a.K)]
    y = torch.randint(0, a.V, (a.N,), generator=g)
    base_kb = status_kb("VmRSS")
    times, loss = [], None
    for i in range(a.warmup + a.calls):
        h.grad = None
        W.grad = None
        t0 = time.perf_counter()
        loss = head_loss(h, W, teachers, y)
        loss.backward()
        dt = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(dt)
    peak_kb = status_kb("VmHWM")
    extra = (peak_kb - base_kb) * 1024.0
    grads = (a.N * a.H + a.V * a.H) * 4
    print(json.dumps({"contender": "pytorch", "N": a.N, "H": a.H, "V": a.V, "K": a.K, "threads": a.threads,
                      "calls": a.calls, "median_s": statistics.median(times), "best_s": min(times),
                      "peak_extra_bytes": extra, "working_bytes": extra - grads, "logits_bytes": a.N * a.V * 4,
                      "loss": float(loss), "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
