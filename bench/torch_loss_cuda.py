#!/usr/bin/env python3
"""PyTorch references for the CUDA loss benchmark (bench/run_loss_bench_cuda.sh).

The distillation loss of DESIGN.md section 6, forward + backward, at the shapes of
bench/kernels/bench_loss_cuda.cpp (N=8192 rows, V in 1000 32768 50304 131072, K in 1 2 4 teachers,
T=2 a=1 h=1, float32 and bfloat16), on the very same inputs (the counter-based generator
below reproduces bench_loss_cuda's logits and labels bit for bit), timed the same way: one
call = forward + backward + a device synchronization, wall time, median over --repeats
calls after --warmup calls, an L2 flush (--flush-mib cleared) before each call.

Implementations (--impls, default all):
  eager         the loss written as a PyTorch user would: cross_entropy + T^2 kl_div of
                log_softmax(z/T) against the mean of the teachers' softmax(t/T), autograd
                for the gradient. bfloat16 logits are upcast first (z.float(), as Hugging
                Face models do before their loss); the gradient comes back in bfloat16.
  compile       torch.compile of the same function (dynamic=False, one compile per shape;
                the compile happens in the warm-up calls and its time is recorded;
                --time-budget S skips it for the shapes that start after S seconds).
  liger         the same loss from Liger-Kernel's kernels: LigerCrossEntropyLoss (in place
                over z, after the soft branch has read z) + T^2 LigerKLDIVLoss(batchmean)
                of log_softmax(z/T) against the teachers' mean probabilities.
  liger_jsd     the same with LigerJSD(beta=0) (forward KL(q_T || p)) for the soft term.
  liger_ce_op, liger_kldiv_op, liger_jsd_op
                each Liger op alone on [N, V] inputs of the dtype (forward + backward),
                for context: not the whole loss.
Liger needs `import liger_kernel.transformers` (bench/wheels/, see bench/fetch_wheels.sh)
and a CUDA device; without them its rows say why they were skipped.

Every shape also gets a float64 reference loss (row chunks, on the device), and each
implementation's loss is compared with it. Besides timing:
  --gen-check DIR    compare the generator with `bench_loss_cuda --gen-check DIR`, bit for bit
  --grad-check DIR   check `bench_loss_cuda --grad-rows DIR`: codistill's loss against the
                     float64 reference over all rows, and its gradient rows against float64
                     gradient rows (max |diff| / max |ref|)
  --device cpu       a smoke run on the CPU (use tiny --n/--v; Liger is skipped)
The JSON (--json) is rewritten after every shape, so a run cut short keeps what it measured.
"""
import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

T_, A_, H_ = 2.0, 1.0, 1.0  # temperature, distillation weight a, hard weight h

# ---- the shared input generator (mirrors bench/kernels/bench_loss_cuda.cpp) -----------------
M32 = 0xFFFFFFFF
MUL1, MUL2 = 0x21F0AAAD, 0x735A2D97
SCALE = 7.0 / 512.0  # exact in binary: value = (byte sum - 510) * 7/512, exact in float32
LABEL_STREAM = 100


def mul32(x, c):
    """(x * c) mod 2^32 for 0 <= x < 2^32, without overflowing int64 (16-bit halves of c)."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & M32


def mix32(x):
    x = x ^ (x >> 16)
    x = mul32(x, MUL1)
    x = x ^ (x >> 15)
    x = mul32(x, MUL2)
    return x ^ (x >> 15)


def stream_key(stream):
    return mix32((0x01000193 * (stream + 1)) & M32)


def logit_rows(stream, V, rows, device):
    """float32 logits of the given rows (a 1-D int64 tensor of row indices)."""
    idx = rows.to(device=device, dtype=torch.int64)[:, None] * V + torch.arange(V, device=device, dtype=torch.int64)
    h = mix32(idx ^ stream_key(stream))
    s = (h & 255) + ((h >> 8) & 255) + ((h >> 16) & 255) + (h >> 24) - 510
    return s.to(torch.float32) * SCALE


def logits(stream, N, V, dtype, device):
    out = torch.empty(N, V, dtype=dtype, device=device)
    step = max(1, (1 << 24) // V)
    for r0 in range(0, N, step):
        r1 = min(N, r0 + step)
        out[r0:r1] = logit_rows(stream, V, torch.arange(r0, r1), device).to(dtype)
    return out


def labels(N, V, device):
    return mix32(torch.arange(N, device=device, dtype=torch.int64) ^ stream_key(LABEL_STREAM)) % V


# ---- the loss ------------------------------------------------------------------------------
def teacher_mean(teachers, T):
    q = F.softmax(teachers[0] / T, dim=1)
    for t in teachers[1:]:
        q = q + F.softmax(t / T, dim=1)
    return q / len(teachers) if len(teachers) > 1 else q


def distill_loss(z, teachers, y, T=T_, a=A_, h=H_):
    """DESIGN.md section 6, averaged over the rows (none is ignored here)."""
    ce = F.cross_entropy(z, y)
    log_p_t = F.log_softmax(z / T, dim=1)
    distill = F.kl_div(log_p_t, teacher_mean(teachers, T), reduction="batchmean") * (T * T)
    return h * ce + a * distill


def distill_loss_upcast(z, teachers, y):
    """The eager/compiled function: logits of any dtype, the loss in float32."""
    return distill_loss(z.float(), [t.float() for t in teachers], y)


@torch.no_grad()
def reference(z, teachers, y, T=T_, a=A_, h=H_):
    """float64 loss over all rows, in row chunks (bounded memory)."""
    N, V = z.shape
    ce_sum = torch.zeros((), dtype=torch.float64, device=z.device)
    kl_sum = torch.zeros((), dtype=torch.float64, device=z.device)
    step = max(1, (1 << 24) // V)
    for r0 in range(0, N, step):
        r1 = min(N, r0 + step)
        zc = z[r0:r1].double()
        ce_sum += (torch.logsumexp(zc, 1) - zc.gather(1, y[r0:r1, None])[:, 0]).sum()
        q = teacher_mean([t[r0:r1].double() for t in teachers], T)
        kl_sum += (torch.xlogy(q, q) - q * F.log_softmax(zc / T, dim=1)).sum()
    ce, distill = ce_sum.item() / N, T * T * kl_sum.item() / N
    return {"loss": h * ce + a * distill, "ce": ce, "distill": distill}


def reference_grad_rows(z_rows, teacher_rows, y_rows, N, T=T_, a=A_, h=H_):
    """float64 gradient of the mean loss over N rows, for the given rows only."""
    z = z_rows.double()
    onehot = F.one_hot(y_rows, z.shape[1]).double()
    q = teacher_mean([t.double() for t in teacher_rows], T)
    return (h * (F.softmax(z, 1) - onehot) + a * T * (F.softmax(z / T, 1) - q)) / N


# ---- timing --------------------------------------------------------------------------------
class Timer:
    def __init__(self, device, flush_mib):
        self.device = device
        self.flush = torch.empty(flush_mib << 18, dtype=torch.float32, device=device)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, step, prepare, warmup, repeats):
        """step() -> loss tensor; prepare() untimed before each call. Returns the timing."""
        t0 = time.perf_counter()
        prepare()
        loss = step()
        self.sync()
        first_s = time.perf_counter() - t0
        first_loss = float(loss)
        for _ in range(warmup - 1):
            prepare()
            step()
        ms = []
        for _ in range(repeats):
            prepare()
            self.flush.zero_()
            self.sync()
            t0 = time.perf_counter()
            loss = step()
            self.sync()
            ms.append((time.perf_counter() - t0) * 1e3)
        return {"median_ms": statistics.median(ms), "min_ms": min(ms), "first_call_s": first_s,
                "loss": first_loss, "loss_last": float(loss)}


def copy_bandwidth(device, mib, timer):
    n = mib << 18
    pattern = logits(7, 1, 1 << 22, torch.float32, device)[0]  # real data, as bench_loss_cuda uploads
    src = pattern.repeat(-(-n // pattern.numel()))[:n].contiguous()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    ms = []
    for _ in range(20):
        timer.sync()
        t0 = time.perf_counter()
        for _ in range(4):
            dst.copy_(src)
        timer.sync()
        ms.append((time.perf_counter() - t0) * 1e3 / 4)
    med = statistics.median(ms)
    return {"bytes": 4 * n, "median_ms": med, "gbs": 2 * 4 * n / (med / 1e3) / 1e9,
            "method": "torch dst.copy_(src), bytes read + written"}


def is_oom(e):
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower()


FULL_LOSS = ["eager", "compile", "liger", "liger_jsd"]
OPS = ["liger_ce_op", "liger_kldiv_op", "liger_jsd_op"]


def load_liger(device):
    if device.type != "cuda":
        return None, "Liger-Kernel needs a CUDA device (Triton kernels)"
    try:
        from liger_kernel.transformers import LigerCrossEntropyLoss, LigerJSD, LigerKLDIVLoss
    except Exception as e:  # ImportError, or a Triton/torch mismatch at import
        return None, (f"liger_kernel is not importable ({type(e).__name__}: {e}); install the wheel "
                      "from bench/wheels/ (bench/fetch_wheels.sh)")
    try:
        from importlib.metadata import version
        ver = version("liger-kernel")
    except Exception:
        ver = "?"
    return {"ce": LigerCrossEntropyLoss, "kldiv": LigerKLDIVLoss, "jsd": LigerJSD, "version": ver}, None


class Skip(Exception):
    pass


def make_impl(impl, c):
    """(step, prepare) for one implementation on the shape's tensors c; raises Skip(why)."""
    z, z0, teachers, y, dtype = c["z"], c["z0"], c["teachers"], c["y"], c["dtype"]

    def restore():  # (Liger's cross-entropy writes its gradient over z)
        z.grad = None
        with torch.no_grad():
            z.copy_(z0)

    if impl == "eager":
        return lambda: _backward(distill_loss_upcast(z, teachers, y)), restore
    if impl == "compile":
        if not hasattr(torch, "compile"):
            raise Skip(f"torch {torch.__version__} has no torch.compile")
        if c["budget_s"] and time.perf_counter() - c["started"] > c["budget_s"]:
            raise Skip(f"--time-budget {c['budget_s']:.0f} s used up before this shape")
        torch._dynamo.reset()  # one compile per shape, never the recompile limit
        compiled = torch.compile(distill_loss_upcast, dynamic=False)
        return lambda: _backward(compiled(z, teachers, y)), restore
    liger = c["liger"]
    if liger is None:
        raise Skip(c["liger_note"])
    ce_fn, kl_fn, jsd_fn = liger["ce"](), liger["kldiv"](reduction="batchmean"), liger["jsd"](beta=0.0)
    if impl in ("liger", "liger_jsd"):
        def step():
            zf = z.float() if dtype != torch.float32 else z
            log_p = F.log_softmax(zf / T_, dim=1)  # reads z before the in-place cross-entropy below
            q = teacher_mean([t.float() for t in teachers], T_)
            distill = kl_fn(log_p, q) if impl == "liger" else jsd_fn(log_p, torch.log(q))
            return _backward(H_ * ce_fn(z, y).float() + A_ * (T_ * T_) * distill)
        return step, restore
    if impl == "liger_ce_op":
        return lambda: _backward(ce_fn(z, y)), restore
    # The soft-term ops alone: student log-probabilities x against the teachers' mean.
    with torch.no_grad():
        x0 = F.log_softmax(z0.float() / T_, dim=1).to(dtype)
        q = teacher_mean([t.float() for t in teachers], T_)
        target = (q if impl == "liger_kldiv_op" else torch.log(q)).to(dtype)
        del q
    x = x0.clone().requires_grad_()

    def restore_x():
        x.grad = None
        with torch.no_grad():
            x.copy_(x0)

    if impl == "liger_kldiv_op":
        return lambda: _backward(kl_fn(x, target)), restore_x
    return lambda: _backward(jsd_fn(x, target)), restore_x


def release(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def bench_shape(args, device, timer, liger, dtype_name, N, V, K, copy_gbs, record):
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    elem = 4 if dtype == torch.float32 else 2
    z0 = logits(0, N, V, dtype, device)
    teachers = [logits(k, N, V, dtype, device) for k in range(1, K + 1)]
    y = labels(N, V, device)
    ref = reference(z0, teachers, y)
    record({"kind": "reference", "dtype": dtype_name, "N": N, "V": V, "K": K, **ref})
    c = {"z": z0.clone().requires_grad_(), "z0": z0, "teachers": teachers, "y": y, "dtype": dtype,
         "liger": liger, "liger_note": args.liger_note, "budget_s": args.time_budget, "started": args.started}
    for impl in [i for i in FULL_LOSS + OPS if i in args.impls]:
        row = {"kind": "timing", "impl": impl, "dtype": dtype_name, "N": N, "V": V, "K": K}
        head = f"{dtype_name:<8} {V:>7} {K:>2} {impl:<15}"
        try:
            step, prepare = make_impl(impl, c)
            r = timer.run(step, prepare, args.warmup, args.repeats)
        except Skip as e:
            record({**row, "skipped": str(e)})
            if impl not in args.said_skip:  # say it once per implementation
                print(f"{head} skipped: {e}", flush=True)
                args.said_skip.add(impl)
            continue
        except Exception as e:  # an out-of-memory (or a library failure) ends this impl only
            what = "out of memory" if is_oom(e) else f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            record({**row, "error": what})
            print(f"{head} FAILED: {what}", flush=True)
            continue
        finally:
            step = prepare = None
            c["z"].grad = None
            release(device)
        reads = {"liger_ce_op": 1, "liger_kldiv_op": 2, "liger_jsd_op": 2}.get(impl, K + 1)
        traffic = float(N * V * elem * (reads + 1))
        gbs = traffic / (r["median_ms"] / 1e3) / 1e9
        full = impl in FULL_LOSS
        rel = abs(r["loss"] - ref["loss"]) / abs(ref["loss"]) if full else None
        record({**row, **r, "bytes": traffic, "gbs": gbs, "pct_copy": 100 * gbs / copy_gbs,
                "loss_rel_err_vs_float64": rel})
        loss_s = f"{r['loss']:.8f}" if full else "-"
        rel_s = f"{rel:.1e}" if full else "-"
        print(f"{head} {r['median_ms']:>10.4f} {r['min_ms']:>10.4f} {gbs:>9.1f} {100 * gbs / copy_gbs:>6.1f}% "
              f"{loss_s:>14} {rel_s:>9}", flush=True)
    c.clear()
    del z0, teachers, y
    release(device)


def _backward(loss):
    loss.backward()
    return loss.detach()


# ---- checks against bench_loss_cuda's files ---------------------------------------------------
def gen_check(path, device):
    meta = json.load(open(f"{path}/gen.json"))
    N, V = meta["N"], meta["V"]
    ok = True
    for s in meta["buffers"]:
        f = logits(s, N, V, torch.float32, device).cpu().numpy()
        b = logits(s, N, V, torch.bfloat16, device).cpu().view(torch.int16).numpy().view(np.uint16)
        ok &= np.array_equal(f, np.fromfile(f"{path}/gen{s}.f32", dtype=np.float32).reshape(N, V))
        ok &= np.array_equal(b, np.fromfile(f"{path}/gen{s}.bf16", dtype=np.uint16).reshape(N, V))
    y = labels(N, V, device).cpu().numpy()
    ok &= np.array_equal(y, np.fromfile(f"{path}/labels.i32", dtype=np.int32).astype(np.int64))
    print(f"generator check (N={N} V={V}, {len(meta['buffers'])} buffers, float32, bfloat16, labels) "
          f"on {device}: {'identical' if ok else 'MISMATCH'}")
    return bool(ok)


def grad_check(path, device):
    index = json.load(open(f"{path}/grad_rows.json"))
    out = []
    print(f"{'dtype':<8} {'V':>7} {'K':>2} {'loss rel err':>12} {'grad rel err':>12}")
    for e in index:
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[e["dtype"]]
        N, V, K, rows = e["N"], e["V"], e["K"], torch.tensor(e["rows"])
        z = logits(0, N, V, dtype, device)
        teachers = [logits(k, N, V, dtype, device) for k in range(1, K + 1)]
        y = labels(N, V, device)
        ref = reference(z, teachers, y, e["temperature"], e["weight"], e["hard_weight"])
        g_ref = reference_grad_rows(z[rows.to(device)], [t[rows.to(device)] for t in teachers],
                                    y[rows.to(device)], N, e["temperature"], e["weight"], e["hard_weight"])
        raw = np.fromfile(f"{path}/{e['file']}", dtype=np.float32 if dtype == torch.float32 else np.uint16)
        if dtype == torch.float32:
            g = torch.from_numpy(raw.copy())
        else:
            g = torch.from_numpy(raw.astype(np.int32) << 16).view(torch.float32)
        g = g.double().view(len(rows), V).to(device)
        grad_err = ((g - g_ref).abs().max() / g_ref.abs().max()).item()
        loss_err = abs(e["loss"] - ref["loss"]) / abs(ref["loss"])
        tol = {"float32": (1e-5, 1e-4), "bfloat16": (1e-3, 1e-2)}[e["dtype"]]
        ok = loss_err < tol[0] and grad_err < tol[1] and math.isfinite(grad_err)
        out.append({"dtype": e["dtype"], "N": N, "V": V, "K": K, "rows": e["rows"], "loss": e["loss"],
                    "loss_float64": ref["loss"], "loss_rel_err": loss_err, "grad_rel_err": grad_err,
                    "tolerance": {"loss": tol[0], "grad": tol[1]}, "ok": ok})
        print(f"{e['dtype']:<8} {V:>7} {K:>2} {loss_err:>12.2e} {grad_err:>12.2e}  {'OK' if ok else 'MISMATCH'}",
              flush=True)
        del z, teachers
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def csv(kind):
    return lambda s: [kind(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--v", type=csv(int), default=[1000, 32768, 50304, 131072])
    ap.add_argument("--k", type=csv(int), default=[1, 2, 4])
    ap.add_argument("--dtypes", type=csv(str), default=["float32", "bfloat16"])
    ap.add_argument("--impls", type=csv(str), default=FULL_LOSS + OPS)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--flush-mib", type=int, default=256)
    ap.add_argument("--time-budget", type=float, metavar="S",
                    help="skip torch.compile (the slow one: a compile per shape) for the shapes that start "
                         "after S seconds")
    ap.add_argument("--json", help="write the results here (rewritten after every shape)")
    ap.add_argument("--gen-check", metavar="DIR", help="compare with bench_loss_cuda --gen-check DIR")
    ap.add_argument("--grad-check", metavar="DIR", help="check bench_loss_cuda --grad-rows DIR")
    args = ap.parse_args()
    args.started = time.perf_counter()
    unknown = set(args.impls) - set(FULL_LOSS + OPS)
    if unknown or not set(args.dtypes) <= {"float32", "bfloat16"} or args.warmup < 1 or args.repeats < 1:
        ap.error(f"--impls from {FULL_LOSS + OPS}, --dtypes from float32,bfloat16, --warmup/--repeats >= 1")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_loss_cuda.py: torch sees no CUDA device (--device cpu runs a smoke test)", file=sys.stderr)
        return 2
    doc = {"benchmark": "loss_cuda", "impl": "pytorch", "torch": torch.__version__, "device_type": device.type,
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    try:
        import triton
        doc["triton"] = triton.__version__
    except Exception:
        doc["triton"] = None

    def dump():
        if args.json:
            with open(args.json + ".tmp", "w") as f:
                json.dump(doc, f, indent=2)
            os.replace(args.json + ".tmp", args.json)

    if args.gen_check:
        doc["gen_check"] = {"ok": gen_check(args.gen_check, device)}
        dump()
        return 0 if doc["gen_check"]["ok"] else 1
    if args.grad_check:
        doc["grad_check"] = grad_check(args.grad_check, device)
        dump()
        return 0 if all(c["ok"] for c in doc["grad_check"]) else 1

    liger, args.liger_note = load_liger(device)
    args.said_skip = set()
    doc.update({"N": args.n, "warmup": args.warmup, "repeats": args.repeats, "flush_mib": args.flush_mib,
                "temperature": T_, "weight": A_, "hard_weight": H_,
                "liger": liger["version"] if liger else None, "liger_note": args.liger_note,
                "timing": "wall time of one forward + backward + device synchronization, median over repeats "
                          "after warm-up (the first call compiles); L2 flushed before each call",
                "results": [], "references": []})
    timer = Timer(device, args.flush_mib)
    doc["copy"] = copy_bandwidth(device, args.copy_mib, timer)
    print(f"torch {torch.__version__} on {doc['device']}: device copy of {args.copy_mib} MiB "
          f"{doc['copy']['median_ms']:.3f} ms, {doc['copy']['gbs']:.1f} GB/s (read + write)")
    if args.liger_note:
        print(args.liger_note)
    print(f"{'dtype':<8} {'V':>7} {'K':>2} {'impl':<15} {'median ms':>10} {'min ms':>10} {'GB/s':>9} "
          f"{'% copy':>7} {'loss':>14} {'vs f64':>9}", flush=True)

    def record(r):
        kind = r.pop("kind")
        (doc["references"] if kind == "reference" else doc["results"]).append(r)

    for V in args.v:
        for dtype_name in args.dtypes:
            for K in args.k:
                bench_shape(args, device, timer, liger, dtype_name, args.n, V, K, doc["copy"]["gbs"], record)
                dump()
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
