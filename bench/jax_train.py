#!/usr/bin/env python3
"""JAX/XLA (CPU) reference for the training benchmark, beside bench/torch_train.py.

Trains the model of a codistill YAML config with the same hyper-parameters (SGD with
momentum/Nesterov and coupled weight decay as torch.optim.SGD, or AdamW as torch.optim.AdamW),
batch size, step count, schedule (warm-up then cosine/step/constant), initialization (PyTorch's
defaults) and thread count, on the same Fashion-MNIST files and "standard" normalization, and
prints one JSON line with the fields of torch_train.py ("jax" holds the version where
torch_train.py has "torch"), plus how it was timed.

Model kinds mlp, cnn and resnet (codistill/models/build.cpp); another kind, or a model.init
other than kaiming_uniform, is refused. resnet's trunk (stem, basic blocks with batch norm,
projection shortcuts, global average pooling) is bench/jax_resnet.py; its batch-norm running
statistics are state carried through the jitted step (an input and an output, donated like
the parameters; the optimizer never sees them, weight decay does reach the batch-norm weights
and biases, as in codistill), and the evaluation uses them. With the same initial weights and
batches, three steps agree with torch_train.py's to 1e-15 in float64 (parameters, running
statistics, evaluation logits), in both layouts. --layout: resnet's activations NHWC (the
default) or NCHW; NHWC ran about 5-10% faster with XLA's CPU backend, 2 threads (both
compiled in one process, measured alternating). cnn is NHWC only.

One training step (batch gather, forward, backward, optimizer update) is a single jitted
function whose parameter, optimizer-state and batch-norm-statistics buffers are donated
(updated in place). Timing:
the step is compiled ahead of time (lower().compile(), reported as compile_s), then the first
--warmup-steps steps run untimed (they still train: the model sees all `steps` steps), then
the remaining steps are timed as one loop, synchronized (block_until_ready) at both ends only,
as JAX dispatches asynchronously. train_examples_per_s = (steps - warmup) * batch / train_s.

Threads: XLA's CPU client sizes its intra-op (Eigen) thread pool from the CPUs the process
may run on, and it has no thread-count flag of its own (the often-quoted XLA_FLAGS token
"intra_op_parallelism_threads=N" is not a flag: the parser skips it silently). So --threads N
restricts the process's CPU affinity to N CPUs (os.sched_setaffinity, as `taskset` does)
before JAX starts (checked with jax 0.10.2: the process then has N "tf_XLAEigen" threads);
XLA_FLAGS gets --xla_cpu_multi_thread_eigen=true (the default, stated).

Run with the benchmark environment's interpreter (scripts/setup.sh --bench makes it):
    .venv-bench/bin/python bench/jax_train.py CONFIG [--steps S] [--threads N]
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import yaml


def limit_threads(threads):
    """Pins this process to `threads` of the CPUs it may use; returns them. Before JAX starts."""
    allowed = sorted(os.sched_getaffinity(0))
    cpus = allowed[:threads]
    os.sched_setaffinity(0, cpus)
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=true").strip()
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return cpus


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fmnist(path):
    """Images as float32 [N, 28, 28, 1] (NHWC, XLA's preferred layout on the CPU)."""
    xs = [read_idx(os.path.join(path, f)) for f in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz")]
    ys = [read_idx(os.path.join(path, f)) for f in ("train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz")]
    train_x = xs[0].astype(np.float32)[..., None]
    test_x = xs[1].astype(np.float32)[..., None]
    # codistill's "standard" normalization: one mean and std (unbiased, as torch's) of the
    # training split.
    mean, std = float(train_x.mean(dtype=np.float64)), float(train_x.std(dtype=np.float64, ddof=1))
    train_x = (train_x - mean) / std
    test_x = (test_x - mean) / std
    return train_x, ys[0].astype(np.int32), test_x, ys[1].astype(np.int32)


def lr_at(o, step, total):
    s = o.get("schedule", {})
    warm = s.get("warmup_steps", 0)
    lr = o["lr"]
    if step < warm:
        return lr * (step + 1) / warm
    kind = s.get("kind", "constant")
    if kind == "step":
        return lr * s.get("gamma", 0.1) ** ((step - warm) // s.get("step_size", 1000))
    if kind == "cosine":
        span = max(1, total - warm)
        lo = s.get("min_lr", 0.0)
        return lo + (lr - lo) * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / span)))
    if kind != "constant":
        # exponential, cyclical, sgdr: not mirrored here; a silent constant rate would
        # make the comparison wrong.
        raise SystemExit(f"optimizer.schedule.kind {kind!r} is not supported by this reference "
                         "(constant, step, cosine)")
    return lr


def build_model(jax, jnp, m, in_shape, classes, seed, pool_impl="reshape", layout="NHWC"):
    """Parameters (PyTorch's default initialization: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
    weights and biases, codistill's kaiming_uniform; batch norm weight 1, bias 0), the
    batch-norm statistics (resnet; empty otherwise) and apply(params, stats, x, key) ->
    (logits, stats); key None means eval mode. layout (NHWC or NCHW, of x too) is used by
    resnet only; cnn is NHWC.

    Max pooling: pool_impl "reduce_window" is lax.reduce_window (what flax's max_pool calls);
    its gradient, XLA's select_and_scatter, is about 10x slower on the CPU than that of
    "reshape" (the default): the same windows (non-overlapping, floor), taken as a reshape
    and a max over the two window axes. The two differ only in how the gradient is shared
    between tied maxima, which after a ReLU are zeros whose gradient the ReLU drops anyway."""
    lax = jax.lax
    act = {"relu": jax.nn.relu, "gelu": lambda v: jax.nn.gelu(v, approximate=False)}[m.get("activation", "relu")]
    dropout = m.get("dropout", 0.0)
    rng = np.random.default_rng(seed)

    def uniform(shape, fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return jnp.asarray(rng.uniform(-bound, bound, size=shape).astype(np.float32))

    if m["kind"] not in ("mlp", "cnn", "resnet"):
        raise SystemExit(f"model.kind {m['kind']!r} is not supported by this reference (mlp, cnn, resnet)")
    if m.get("init", "kaiming_uniform") != "kaiming_uniform":
        raise SystemExit(f"model.init {m['init']!r} is not supported by this reference (kaiming_uniform)")
    params, plan, stats = [], [], {}
    h, w, c = in_shape
    if m["kind"] == "resnet":
        from jax_resnet import resnet_trunk  # bench/, beside this script
        trunk, stats, trunk_apply, c = resnet_trunk(jax, jnp, m, c, uniform, act, layout)
        params.append(trunk)
        plan.append(("resnet", trunk_apply))
        h = w = 1
    elif m["kind"] == "cnn":
        k, pool = m.get("kernel_size", 5), m.get("pool", 2)
        for out in m.get("channels", [32, 64]):
            fan_in = c * k * k
            params.append({"w": uniform((k, k, c, out), fan_in), "b": uniform((out,), fan_in)})
            plan.append(("conv", pool))
            c, h, w = out, h // pool, w // pool
    features = c * h * w
    for width in m.get("hidden", [256, 256] if m["kind"] != "cnn" else [128]):
        params.append({"w": uniform((features, width), features), "b": uniform((width,), features)})
        plan.append(("hidden", None))
        features = width
    params.append({"w": uniform((features, classes), features), "b": uniform((classes,), features)})
    plan.append(("out", None))

    def apply(ps, st, x, key):
        flat = False
        for i, (p, (kind, arg)) in enumerate(zip(ps, plan)):
            if kind == "resnet":  # arg: the trunk's apply
                x, st = arg(p, st, x, key is not None)
                continue
            if kind == "conv":  # arg: the pooling window
                pool = arg
                # padding k//2 on each side (torch's padding=k//2); floor pooling (MaxPool2d).
                pad = p["w"].shape[0] // 2
                x = lax.conv_general_dilated(x, p["w"], (1, 1), [(pad, pad), (pad, pad)],
                                             dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["b"]
                x = act(x)
                if pool_impl == "reduce_window":
                    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, pool, pool, 1), (1, pool, pool, 1), "VALID")
                else:
                    b, hh, ww, cc = x.shape
                    x = x[:, :hh // pool * pool, :ww // pool * pool]
                    x = x.reshape(b, hh // pool, pool, ww // pool, pool, cc).max(axis=(2, 4))
                continue
            if not flat:
                x, flat = x.reshape(x.shape[0], -1), True
            x = x @ p["w"] + p["b"]
            if kind == "hidden":
                x = act(x)
                if dropout > 0 and key is not None:
                    keep = jax.random.bernoulli(jax.random.fold_in(key, i), 1.0 - dropout, x.shape)
                    x = jnp.where(keep, x / (1.0 - dropout), 0.0)
        return x, st

    return params, stats, apply


def make_optimizer(jax, jnp, o):
    """(init(params) -> state, update(params, grads, state, lr) -> (params, state)), with the
    update rules of torch.optim.SGD / torch.optim.AdamW."""
    tmap = jax.tree_util.tree_map
    wd = o.get("weight_decay", 0.0)
    if o["kind"] == "sgd":
        mom, nesterov = o.get("momentum", 0.9), o.get("nesterov", False)

        def init(params):
            return tmap(jnp.zeros_like, params)

        def update(params, grads, buf, lr):
            grads = tmap(lambda g, p: g + wd * p, grads, params) if wd else grads
            if mom == 0:
                return tmap(lambda p, g: p - lr * g, params, grads), buf
            # torch's first step sets buf = g, which momentum * 0 + g also gives.
            buf = tmap(lambda b, g: mom * b + g, buf, grads)
            step = tmap(lambda g, b: g + mom * b, grads, buf) if nesterov else buf
            return tmap(lambda p, d: p - lr * d, params, step), buf

        return init, update

    b1, b2, eps = o.get("beta1", 0.9), o.get("beta2", 0.999), o.get("eps", 1e-8)

    def init(params):
        return {"m": tmap(jnp.zeros_like, params), "v": tmap(jnp.zeros_like, params),
                "t": jnp.zeros((), jnp.float32)}

    def update(params, grads, s, lr):
        t = s["t"] + 1
        m = tmap(lambda m_, g: b1 * m_ + (1 - b1) * g, s["m"], grads)
        v = tmap(lambda v_, g: b2 * v_ + (1 - b2) * g * g, s["v"], grads)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t

        def one(p, m_, v_):
            p = p * (1 - lr * wd)
            return p - (lr / bc1) * m_ / (jnp.sqrt(v_) / jnp.sqrt(bc2) + eps)

        return tmap(one, params, m, v), {"m": m, "v": v, "t": t}

    return init, update


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, help="override train.steps")
    ap.add_argument("--threads", type=int, help="override run.threads")
    ap.add_argument("--batch", type=int, help="override data.batch_size")
    ap.add_argument("--data-path", help="override data.path")
    ap.add_argument("--warmup-steps", type=int, default=5,
                    help="first steps left out of the timing (after the ahead-of-time compile)")
    ap.add_argument("--pool", choices=("reshape", "reduce_window"), default="reshape",
                    help="max-pooling formulation (see build_model)")
    ap.add_argument("--layout", choices=("NHWC", "NCHW"), default="NHWC",
                    help="resnet: activation layout (see the docstring)")
    return ap.parse_args()


def make_train_step(jax, jnp, apply, opt_update, base_key):
    """One step on the rows idx of the training set held on the device: loss, gradient
    (dropout keyed by the step) and the optimizer's update."""
    def loss_fn(ps, st, x, y, key):
        logits, st = apply(ps, st, x, key)
        return jnp.mean(jax.nn.logsumexp(logits, axis=1) - jnp.take_along_axis(logits, y[:, None], 1)[:, 0]), st

    def train_step(ps, state, st, all_x, all_y, idx, lr, step):
        x, y = all_x[idx], all_y[idx]
        (loss, st), grads = jax.value_and_grad(loss_fn, has_aux=True)(ps, st, x, y, jax.random.fold_in(base_key, step))
        ps, state = opt_update(ps, grads, state, lr)
        return ps, state, st, loss

    return train_step


def batch_sampler(n, batch, seed):
    """(the first permutation, next_batch): rows in a fresh permutation each epoch, the
    tail that does not fill a batch dropped."""
    rng = np.random.default_rng(seed)
    perm, cursor = rng.permutation(n).astype(np.int32), 0
    first = perm

    def next_batch():
        nonlocal perm, cursor
        if cursor + batch > n:
            perm, cursor = rng.permutation(n).astype(np.int32), 0
        idx = perm[cursor:cursor + batch]
        cursor += batch
        return idx

    return first, next_batch


def evaluate_test(jax, jnp, apply, params, bn_stats, test_x, test_y):
    """(correct, summed cross-entropy) over the test set, in chunks of 1000."""
    @jax.jit
    def evaluate(ps, st, x, y):
        logits, _ = apply(ps, st, x, None)
        ce = jax.nn.logsumexp(logits, axis=1) - jnp.take_along_axis(logits, y[:, None], 1)[:, 0]
        return jnp.sum(ce), jnp.sum(jnp.argmax(logits, axis=1) == y)

    correct, loss_sum = 0, 0.0
    for i in range(0, test_x.shape[0], 1000):
        s, c = evaluate(params, bn_stats, jnp.asarray(test_x[i:i + 1000]), jnp.asarray(test_y[i:i + 1000]))
        loss_sum += float(s)
        correct += int(c)
    return correct, loss_sum


def main():
    args = parse_args()
    cfg = yaml.safe_load(open(args.config))
    steps = args.steps or cfg["train"]["steps"]
    threads = args.threads or cfg["run"].get("threads", 2)
    cpus = limit_threads(threads)

    import jax  # only now: limit_threads set the affinity XLA sizes its thread pool from
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")

    seed = cfg["run"].get("seed", 1)
    data = cfg["data"]
    train_x, train_y, test_x, test_y = load_fmnist(args.data_path or data.get("path", "/usr/share/datasets/fashion-mnist"))
    params, bn_stats, apply = build_model(jax, jnp, cfg["model"], (28, 28, 1), 10, seed, args.pool, args.layout)
    if cfg["model"]["kind"] == "resnet" and args.layout == "NCHW":
        train_x, test_x = (np.ascontiguousarray(a.transpose(0, 3, 1, 2)) for a in (train_x, test_x))
    o = cfg["optimizer"]
    opt_init, opt_update = make_optimizer(jax, jnp, o)
    opt_state = opt_init(params)
    batch = args.batch or data.get("batch_size", 128)
    dev_x, dev_y = jnp.asarray(train_x), jnp.asarray(train_y)
    train_step = make_train_step(jax, jnp, apply, opt_update, jax.random.key(seed))
    first_perm, next_batch = batch_sampler(train_x.shape[0], batch, seed)

    t = time.perf_counter()
    step_fn = jax.jit(train_step, donate_argnums=(0, 1, 2)).lower(
        params, opt_state, bn_stats, dev_x, dev_y, first_perm[:batch], np.float32(0), np.int32(0)).compile()
    compile_s = time.perf_counter() - t

    warmup = max(0, min(args.warmup_steps, steps - 1))
    loss = None
    t = time.perf_counter()
    for step in range(steps):
        if step == warmup:
            jax.block_until_ready((params, opt_state, bn_stats, loss))
            loop_start = time.perf_counter()
            warmup_s = loop_start - t
        params, opt_state, bn_stats, loss = step_fn(params, opt_state, bn_stats, dev_x, dev_y, next_batch(),
                                                    np.float32(lr_at(o, step, steps)), np.int32(step))
    jax.block_until_ready((params, opt_state, bn_stats, loss))
    train_s = time.perf_counter() - loop_start

    correct, loss_sum = evaluate_test(jax, jnp, apply, params, bn_stats, test_x, test_y)
    timed = steps - warmup
    print(json.dumps({
        "impl": "jax", "jax": jax.__version__, "threads": threads, "steps": steps, "batch": batch,
        "device": "cpu", "tf32": None,
        "train_examples_per_s": timed * batch / train_s, "train_s": train_s,
        "test_accuracy": correct / test_x.shape[0], "test_loss": loss_sum / test_x.shape[0],
        "timed_steps": timed, "warmup_steps": warmup, "warmup_s": warmup_s, "compile_s": compile_s,
        "cpus": cpus, "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "pool": args.pool if cfg["model"]["kind"] == "cnn" else None,
        "layout": args.layout if cfg["model"]["kind"] == "resnet" else None}))


if __name__ == "__main__":
    sys.exit(main())
