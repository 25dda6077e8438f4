#!/usr/bin/env python3
"""PyTorch and JAX side of bench/run_attention_bench.sh: causal self-attention alone, forward
and backward, float32, on the layout of codistill's attention op: qkv [B*T, 3D] (D = H x hd)
-> y [B*T, D], then the gradient of qkv from a fixed dy. One length T per process, so that
the process's peak resident memory is this attention's. --dtype bfloat16: qkv and dy held as
bfloat16 and the attention run on them as each framework runs bf16 on the CPU (the contender is
then "torch-bf16" / "jax-bf16"), beside codistill's flash attention with bf16 operands.
  --framework torch: the written-out softmax (scores, causal mask, softmax, weighted sum;
    torch 1.13 has no scaled_dot_product_attention), autograd backward. Debian's torch.
  --framework jax: jax.nn.dot_product_attention(is_causal=True); forward + backward as one
    jitted jax.vjp, compiled before timing. .venv-bench's JAX.
A warm-up call, then `repeats` timed calls (forward + backward, synchronized). Prints one JSON
line: best and median ms, the forward's median alone, the peak resident memory (VmHWM, MiB)
and the resident memory once the framework is loaded, before the inputs exist (base_rss_mib).
    python bench/py_attention.py --framework torch|jax --T 1024 [--B 1] [--H 12] [--hd 64]
        [--threads 2] [--repeats 5] [--dtype float32|bfloat16]
"""
import argparse
import json
import os
import statistics
import time


def status_mib(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def torch_calls(a):
    import torch

    torch.set_num_threads(a.threads)
    base = status_mib("VmRSS")
    B, T, H, hd = a.B, a.T, a.H, a.hd
    D = H * hd
    g = torch.Generator().manual_seed(7)
    dtype = torch.bfloat16 if a.dtype == "bfloat16" else torch.float32
    qkv0 = (torch.rand(B * T, 3 * D, generator=g) * 2 - 1).to(dtype)
    dy = (torch.rand(B * T, D, generator=g) * 2 - 1).to(dtype)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)

    def forward(qkv):
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in qkv.split(D, dim=1))
        s = (q @ k.transpose(-2, -1)) * hd ** -0.5
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        return (p @ v).transpose(1, 2).reshape(B * T, D)

    def call():
        qkv = qkv0.clone().requires_grad_(True)
        t0 = time.perf_counter()
        y = forward(qkv)
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t0

    return call, torch.__version__, base


def jax_calls(a):
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: a.threads])
    import jax  # after the affinity: XLA's CPU pool is sized from it
    import jax.numpy as jnp

    jnp.zeros(1).block_until_ready()  # the client and its pools exist before the baseline
    base = status_mib("VmRSS")
    B, T, H, hd = a.B, a.T, a.H, a.hd
    D = H * hd
    k1, k2 = jax.random.split(jax.random.PRNGKey(7))
    dtype = jnp.bfloat16 if a.dtype == "bfloat16" else jnp.float32
    qkv = jax.random.uniform(k1, (B * T, 3 * D), jnp.float32, -1, 1).astype(dtype)
    dy = jax.random.uniform(k2, (B * T, D), jnp.float32, -1, 1).astype(dtype)

    def forward(qkv):
        q, k, v = (t.reshape(B, T, H, hd) for t in jnp.split(qkv, 3, axis=1))
        return jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(B * T, D)

    def fwd_bwd(qkv, dy):
        y, vjp = jax.vjp(forward, qkv)
        return y, vjp(dy)[0]

    fwd = jax.jit(forward).lower(qkv).compile()
    both = jax.jit(fwd_bwd).lower(qkv, dy).compile()

    def call():
        t0 = time.perf_counter()
        jax.block_until_ready(fwd(qkv))
        t1 = time.perf_counter()
        jax.block_until_ready(both(qkv, dy))
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1  # the jitted forward + backward is timed on its own

    return call, jax.__version__, base


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--framework", required=True, choices=["torch", "jax"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    for k, v in dict(B=1, T=1024, H=12, hd=64, threads=2, repeats=5).items():
        p.add_argument("--" + k, type=int, default=v)
    a = p.parse_args()
    call, version, base = (torch_calls if a.framework == "torch" else jax_calls)(a)
    call()  # warm-up
    fwd, total = zip(*(call() for _ in range(a.repeats)))
    ms = [x * 1e3 for x in total]
    name = a.framework + ("-bf16" if a.dtype == "bfloat16" else "")
    print(json.dumps({"contender": name, "dtype": a.dtype, "version": version, "B": a.B, "T": a.T, "H": a.H, "hd": a.hd,
                      "threads": a.threads, "repeats": a.repeats, "best_ms": round(min(ms), 3),
                      "median_ms": round(statistics.median(ms), 3),
                      "fwd_median_ms": round(statistics.median(fwd) * 1e3, 3),
                      "peak_rss_mib": round(status_mib("VmHWM"), 1), "base_rss_mib": round(base, 1)}))


if __name__ == "__main__":
    main()
