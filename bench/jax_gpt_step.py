#!/usr/bin/env python3
"""JAX/XLA (CPU) side of bench/run_gpt_step_bench.sh: one training step of the model of
codistill's `gpt` kind, the same as bench/torch_gpt_step.py (architecture, init spread, loss,
AdamW with lr 3e-4 and decoupled weight decay 0.1 on every parameter, as torch.optim.AdamW
with its defaults), written in plain jax.numpy. The whole step (forward, loss, gradient,
update) is one jitted function whose parameter and optimizer-state buffers are donated; it
is compiled ahead of time, run `warmup` times untimed, then each timed step is synchronized
(block_until_ready). Threads as bench/jax_train.py: the process's CPU affinity restricted to
--threads CPUs before JAX starts (XLA's CPU client sizes its pool from it).
--gelu tanh: GELU's tanh form (GPT-2's). --attention sdpa: jax.nn.dot_product_attention
(is_causal) instead of the written-out softmax. --dtype bf16: every dense product's operands
cast to bfloat16 with float32 accumulation (preferred_element_type), parameters and
optimizer state float32 (mixed precision, as codistill's train.precision bf16).
Prints one JSON line with the fields of bench_gpt_step (contender "jax"), with the peak
resident memory (ru_maxrss, MiB) at the end.
    .venv-bench/bin/python bench/jax_gpt_step.py [--B 8] [--T 128] ... [--threads 2]
"""
import argparse
import json
import math
import os
import resource
import time


def parse_args():
    p = argparse.ArgumentParser()
    for k, v in dict(B=8, T=128, D=128, heads=4, layers=4, V=8192, threads=2, steps=10, warmup=2).items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--gelu", default="erf", choices=["erf", "tanh"])
    p.add_argument("--attention", default="materialized", choices=["materialized", "sdpa"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bf16"])
    return p.parse_args()


def init_params(jax, jnp, a):
    """The gpt model's parameters, drawn in the same order as before the split (key 1)."""
    D, T, V = a.D, a.T, a.V
    key = jax.random.PRNGKey(1)

    def normal(shape):
        nonlocal key
        key, sub = jax.random.split(key)
        return 0.02 * jax.random.normal(sub, shape, jnp.float32)

    def linear(i, o, bias=True):
        return {"w": normal((o, i)), "b": jnp.zeros((o,), jnp.float32)} if bias else {"w": normal((o, i))}

    def ln():
        return {"g": jnp.ones((D,), jnp.float32), "b": jnp.zeros((D,), jnp.float32)}

    params = {"wte": normal((V, D)), "wpe": normal((T, D)), "ln_f": ln(),
              "blocks": [{"ln1": ln(), "qkv": linear(D, 3 * D), "proj": linear(D, D), "ln2": ln(),
                          "fc1": linear(D, 4 * D), "fc2": linear(4 * D, D)} for _ in range(a.layers)]}
    if not a.tied:
        params["head"] = normal((V, D))
    return params


def make_loss(jax, jnp, a):
    """loss_fn(params, idx, labels): mean cross-entropy of the next-token logits."""
    B, T, D, H, V = a.B, a.T, a.D, a.heads, a.V
    hd = D // H
    mask = jnp.tril(jnp.ones((T, T), bool))

    def layernorm(x, p):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * p["g"] + p["b"]

    def dense(x, p):
        if a.dtype == "bf16":
            y = jnp.dot(x.astype(jnp.bfloat16), p["w"].T.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        else:
            y = x @ p["w"].T
        return y + p["b"] if "b" in p else y

    def attention(q, k, v):
        """q, k, v [B, T, H, hd] -> [B, T, D]."""
        if a.attention == "sdpa":
            return jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(B, T, D)
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        s = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd)
        pr = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
        return (pr @ v).transpose(0, 2, 1, 3).reshape(B, T, D)

    def forward(params, idx):
        x = params["wte"][idx] + params["wpe"][None, :, :]
        for blk in params["blocks"]:
            q, k, v = jnp.split(dense(layernorm(x, blk["ln1"]), blk["qkv"]), 3, axis=-1)
            y = attention(*(t.reshape(B, T, H, hd) for t in (q, k, v)))
            x = x + dense(y, blk["proj"])
            x = x + dense(jax.nn.gelu(dense(layernorm(x, blk["ln2"]), blk["fc1"]), approximate=a.gelu == "tanh"), blk["fc2"])
        head = params["wte"] if a.tied else params["head"]
        return dense(layernorm(x, params["ln_f"]), {"w": head}).reshape(B * T, V)

    def loss_fn(params, idx, labels):
        logits = forward(params, idx)
        logz = jax.nn.logsumexp(logits, axis=-1)
        return jnp.mean(logz - jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0])

    return loss_fn


def make_step(jax, jnp, loss_fn):
    """The whole training step: loss, gradient and the AdamW update (torch's defaults)."""
    lr, wd, b1, b2, eps = 3e-4, 0.1, 0.9, 0.999, 1e-8

    def step(params, m, v, t, idx, labels):
        loss, g = jax.value_and_grad(loss_fn)(params, idx, labels)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        params = jax.tree_util.tree_map(
            lambda p, m, v: p * (1 - lr * wd) - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
        return params, m, v, t, loss

    return step


def time_steps(jax, compiled, state, batch, a):
    """Runs `warmup` untimed steps, then `steps` synchronized ones; returns their
    milliseconds, the final state and the last loss."""
    params, m, v, t = state
    loss = None
    for _ in range(a.warmup):
        params, m, v, t, loss = compiled(params, m, v, t, *batch)
    jax.block_until_ready(params)
    ms = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        params, m, v, t, loss = compiled(params, m, v, t, *batch)
        jax.block_until_ready((params, loss))
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms, params, loss


def main():
    a = parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: a.threads])
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=true").strip()
    import jax  # only now: XLA's CPU client sizes its thread pool from the affinity set above
    import jax.numpy as jnp

    B, T, D, H, L, V = a.B, a.T, a.D, a.heads, a.layers, a.V
    params = init_params(jax, jnp, a)
    step = make_step(jax, jnp, make_loss(jax, jnp, a))
    m, v, t = (jax.tree_util.tree_map(jnp.zeros_like, params), jax.tree_util.tree_map(jnp.zeros_like, params),
               jnp.zeros((), jnp.float32))
    k1, k2 = jax.random.split(jax.random.PRNGKey(7))
    idx = jax.random.randint(k1, (B, T), 0, V, jnp.int32)
    labels = jax.random.randint(k2, (B * T,), 0, V, jnp.int32)
    t0 = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(0, 1, 2)).lower(params, m, v, t, idx, labels).compile()
    compile_s = time.perf_counter() - t0
    ms, params, loss = time_steps(jax, compiled, (params, m, v, t), (idx, labels), a)
    ms_sorted = sorted(ms)
    median, best = ms_sorted[len(ms) // 2], ms_sorted[0]
    nparams = sum(x.size for x in jax.tree_util.tree_leaves(params))
    N = B * T
    matrix_params = nparams - T * D - (0 if a.tied else V * D)  # embeddings are gathers
    flops = 6.0 * matrix_params * N + 12.0 * L * B * T * T * D
    print(json.dumps({"contender": "jax", "jax": jax.__version__, "B": B, "T": T, "D": D, "heads": H, "layers": L,
                      "V": V, "tied": a.tied, "threads": a.threads, "params": int(nparams),
                      "step_ms_median": round(median, 3), "step_ms_best": round(best, 3),
                      "tokens_per_s": round(N / (median / 1e3), 1), "gflop_per_step": round(flops / 1e9, 3),
                      "gflops_at_median": round(flops / 1e9 / (median / 1e3), 1), "final_loss": round(float(loss), 5),
                      "compile_s": round(compile_s, 2), "steps": a.steps, "warmup": a.warmup, "gelu": a.gelu,
                      "attention": a.attention, "dtype": a.dtype,
                      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    main()
