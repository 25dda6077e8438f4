#!/usr/bin/env python3
"""JAX/XLA (CPU) reference for the loss benchmark (bench/run_loss_bench.sh), beside
bench/torch_loss.py, with the same options, shapes, timing and output.

The same math as codistill's fused distillation loss (DESIGN.md section 6), written the
way a JAX user would: one jitted function returning the loss and its gradient with respect
to the student logits (written out by default, or jax.value_and_grad with --grad autodiff;
XLA fuses what it can):
    q = mean_k softmax(t_k / T)
    loss = h * mean CE(z, y) + a * T^2 * mean_rows KL(q || softmax(z / T))
averaged over the rows whose label is not -1 (a mask: jit needs static shapes), at the
shapes of bench/kernels/bench_loss.cpp (N=4096 V=1000 K=1; N=4096 V=1000 K=4; N=1024 V=32768 K=1;
T=2, a=1, h=1, float32). The function is compiled before the warm-up calls; then the median
and minimum over repeats of one call each, synchronized (block_until_ready on loss and
gradient) after every call.

--check DIR recomputes, in float64, the shared input written by `bench_loss --dump DIR` and
compares loss and gradient with codistill's (exit status 1 on a mismatch), no timing.
--only I times the I-th shape alone (1-based). --threads N pins the process to N CPUs
before JAX starts (XLA sizes its CPU thread pool from them; see bench/jax_train.py).
Run with the benchmark environment: .venv-bench/bin/python bench/jax_loss.py [--json PATH].
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

SHAPES = [(4096, 1000, 1), (4096, 1000, 4), (1024, 32768, 1)]


def limit_threads(threads):
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cpus)
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=true").strip()
    return cpus


def make_loss(jax, jnp, T, a, h, grad="closed"):
    """A jitted f(z [N, V], teachers [K, N, V], y [N]) -> ((loss, (ce, distill)), dloss/dz).

    grad "autodiff": jax.value_and_grad of the loss. grad "closed" (the default, about twice
    as fast on XLA CPU): the same loss, and the gradient written out as DESIGN.md section 6
    gives it, h * (softmax(z) - onehot(y)) + a * T * (softmax(z / T) - q), over the kept rows,
    as a JAX user who wants a fast loss would write it."""
    from jax.scipy.special import xlogy

    def parts(z, teachers, y):
        keep = y != -1
        rows = jnp.maximum(jnp.sum(keep), 1).astype(z.dtype)
        log_p = jax.nn.log_softmax(z, axis=1)
        ce = -jnp.take_along_axis(log_p, jnp.where(keep, y, 0)[:, None], axis=1)[:, 0]
        log_p_t = jax.nn.log_softmax(z / T, axis=1)
        q = jnp.mean(jax.nn.softmax(teachers / T, axis=2), axis=0)
        kl = jnp.sum(xlogy(q, q) - q * log_p_t, axis=1)
        ce_mean = jnp.sum(jnp.where(keep, ce, 0)) / rows
        distill = jnp.sum(jnp.where(keep, kl, 0)) / rows * (T * T)
        return (h * ce_mean + a * distill, (ce_mean, distill)), (keep, rows, log_p, log_p_t, q)

    if grad == "autodiff":
        return jax.jit(jax.value_and_grad(lambda z, t, y: parts(z, t, y)[0], has_aux=True))

    def closed(z, teachers, y):
        value, (keep, rows, log_p, log_p_t, q) = parts(z, teachers, y)
        onehot = jax.nn.one_hot(y, z.shape[1], dtype=z.dtype)  # all zeros for y = -1
        g = h * (jnp.exp(log_p) - onehot) + (a * T) * (jnp.exp(log_p_t) - q)
        return value, jnp.where(keep[:, None], g, 0) / rows

    return jax.jit(closed)


def time_shape(jax, jnp, N, V, K, T, a, h, warmup, repeats, seed, grad):
    rng = np.random.default_rng(seed)
    z = jnp.asarray((rng.standard_normal((N, V), dtype=np.float32) * 2.0))
    teachers = jnp.asarray((rng.standard_normal((K, N, V), dtype=np.float32) * 2.0))
    y = jnp.asarray(rng.integers(0, V, N, dtype=np.int32))
    f = make_loss(jax, jnp, T, a, h, grad).lower(z, teachers, y).compile()
    for _ in range(warmup):
        jax.block_until_ready(f(z, teachers, y))
    ms = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        (loss, _), grad = f(z, teachers, y)
        jax.block_until_ready((loss, grad))
        ms.append((time.perf_counter() - t0) * 1e3)
    return {"N": N, "V": V, "K": K, "temperature": T, "median_ms": statistics.median(ms),
            "min_ms": min(ms), "repeats": repeats, "loss": float(loss)}


def check(jax, jnp, path):
    jax.config.update("jax_enable_x64", True)
    meta = json.load(open(f"{path}/meta.json"))
    N, V, K = meta["N"], meta["V"], meta["K"]
    z = np.fromfile(f"{path}/student.f32", dtype=np.float32).reshape(N, V).astype(np.float64)
    teachers = np.stack([np.fromfile(f"{path}/teacher{k}.f32", dtype=np.float32).reshape(N, V)
                         for k in range(K)]).astype(np.float64)
    y = np.fromfile(f"{path}/labels.i32", dtype=np.int32)
    ours_grad = np.fromfile(f"{path}/grad.f32", dtype=np.float32).reshape(N, V)
    all_ok, worst_loss, worst_grad = True, 0.0, 0.0
    for grad_kind in ("closed", "autodiff"):  # both formulations must agree with ours
        f = make_loss(jax, jnp, meta["temperature"], meta["weight"], meta["hard_weight"], grad_kind)
        (loss, (ce, distill)), grad = f(jnp.asarray(z), jnp.asarray(teachers), jnp.asarray(y))
        loss, ce, distill, grad = float(loss), float(ce), float(distill), np.asarray(grad)
        loss_err = abs(loss - meta["loss"]) / abs(loss)
        grad_err = float(np.abs(ours_grad - grad).max() / np.abs(grad).max())
        ok = loss_err < 1e-5 and grad_err < 1e-5
        print(f"check {grad_kind} (N={N} V={V} K={K} T={meta['temperature']}, {N - meta['rows']} rows ignored): "
              f"loss jax {loss:.9f} ours {meta['loss']:.9f} rel err {loss_err:.2e}; "
              f"ce {ce:.6f}/{meta['ce']:.6f} distill {distill:.6f}/{meta['distill']:.6f}; "
              f"grad max err / max |grad| {grad_err:.2e} -> {'OK' if ok else 'MISMATCH'}")
        all_ok, worst_loss, worst_grad = all_ok and ok, max(worst_loss, loss_err), max(worst_grad, grad_err)
    return all_ok, worst_loss, worst_grad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--check", metavar="DIR", help="compare with bench_loss --dump DIR")
    ap.add_argument("--only", type=int, metavar="I", help="time the I-th shape alone (1-based)")
    ap.add_argument("--grad", choices=("closed", "autodiff"), default="closed",
                    help="gradient: written out (default) or jax.value_and_grad")
    args = ap.parse_args()
    cpus = limit_threads(args.threads)
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    doc = {"benchmark": "loss_cpu", "impl": "jax", "jax": jax.__version__,
           "threads": args.threads, "cpus": cpus, "warmup": args.warmup, "dtype": "float32",
           "grad": args.grad}
    if args.check:
        ok, loss_err, grad_err = check(jax, jnp, args.check)
        doc["check"] = {"ok": ok, "loss_rel_err": loss_err, "grad_rel_err": grad_err}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=2)
        return 0 if ok else 1
    print(f"jax {jax.__version__} fwd+bwd ({args.grad} gradient, jit), float32, T=2 a=1 h=1, "
          f"{args.threads} threads, median of {args.repeats}")
    print(f"{'N':>6} {'V':>6} {'K':>2} {'jax ms':>11} {'loss':>12}")
    results = []
    for i, (N, V, K) in enumerate(SHAPES):
        if args.only is not None and args.only != i + 1:
            continue
        r = time_shape(jax, jnp, N, V, K, 2.0, 1.0, 1.0, args.warmup, args.repeats,
                       seed=100 + i, grad=args.grad)
        results.append(r)
        print(f"{N:>6} {V:>6} {K:>2} {r['median_ms']:>11.3f} {r['loss']:>12.6f}")
    doc["results"] = results
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
