#!/usr/bin/python3
"""PyTorch reference for the training benchmark (CPU, or CUDA with --device cuda).

Trains the model of a codistill YAML config with the same hyper-parameters, batch size,
step count, schedule and thread count, on the same Fashion-MNIST files and normalization,
and prints one JSON line: training throughput (examples/s over the step loop alone, data
loading and evaluation excluded, as codistill's `done.train_examples_per_s`) and test
accuracy. Run with Debian's interpreter: /usr/bin/python3 bench/torch_train.py CONFIG.

--device cuda (bench/run_train_bench_cuda.sh) keeps the whole dataset on the GPU, indexes
each batch there and times the step loop as a whole (synchronized at both ends, no
synchronization inside, as a PyTorch user's loop runs); TF32 stays off for matrix products
and convolutions unless the config's train.allow_tf32 or --tf32 says otherwise, as in
codistill. --batch, --data-path override data.batch_size and data.path (codistill's --set).

Model kinds mlp, cnn and resnet, built as codistill/models/build.cpp builds them; another
kind, or a model.init other than kaiming_uniform (which is PyTorch's default initialization),
is refused rather than run as something else. resnet (e.g. configs/fmnist_resnet.yaml,
ResNet-8): bias-free 3x3 convs, nn.BatchNorm2d with codistill's eps 1e-5 and momentum 0.1
(codistill's BatchNorm takes PyTorch's convention, so the numbers carry over as they are:
batch statistics and running-statistics updates in the step loop, running statistics for
the test set), 1x1 conv + bn projection shortcuts where a stage changes the shape, global
average pooling. Weight decay reaches the batch-norm weights and biases too, as in
codistill (one parameter group). --memory-format: the resnet runs channels_last (NHWC) on
the CPU by default, about 1.4x the throughput of contiguous NCHW with torch 1.13 and 2
threads (both measured in one process, alternating); mlp and cnn stay contiguous, as their
committed results were measured; on CUDA the default is contiguous (not measured there).
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
import torch
import torch.nn as nn
import yaml


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fmnist(path):
    xs = [read_idx(os.path.join(path, f)) for f in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz")]
    ys = [read_idx(os.path.join(path, f)) for f in ("train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz")]
    train_x = torch.from_numpy(xs[0].astype(np.float32)).unsqueeze(1)
    test_x = torch.from_numpy(xs[1].astype(np.float32)).unsqueeze(1)
    # codistill's "standard" normalization: one mean and std of the training split.
    mean, std = train_x.mean().item(), train_x.std().item()
    train_x = (train_x - mean) / std
    test_x = (test_x - mean) / std
    return train_x, torch.from_numpy(ys[0].astype(np.int64)), test_x, torch.from_numpy(ys[1].astype(np.int64))


def activation(name):
    return {"relu": nn.ReLU, "gelu": nn.GELU}[name]()


def batch_norm(channels):
    # codistill's BatchNorm (codistill/nn/layers/batchnorm.hpp) takes PyTorch's convention: eps
    # 1e-5, running = (1 - 0.1) * running + 0.1 * batch statistic, the running variance
    # unbiased; training normalizes with the batch's biased variance. Stated, not defaulted.
    return nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1)


class BasicBlock(nn.Module):
    """codistill's basic_block (codistill/models/build.cpp): conv3x3(stride) -> bn -> act ->
    conv3x3 -> bn, plus the identity shortcut, or where the width or the resolution changes
    a 1x1 conv at the stride (no bias) -> bn. The activation after the sum is the model's
    next layer, as in codistill."""

    def __init__(self, c, width, stride, act):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, width, 3, stride, 1, bias=False), batch_norm(width), activation(act),
                                  nn.Conv2d(width, width, 3, 1, 1, bias=False), batch_norm(width))
        self.shortcut = nn.Identity()
        if stride != 1 or c != width:
            self.shortcut = nn.Sequential(nn.Conv2d(c, width, 1, stride, 0, bias=False), batch_norm(width))

    def forward(self, x):
        return self.body(x) + self.shortcut(x)


def resnet_trunk(m, c):
    """codistill's build_resnet up to the classifier head: a 3x3 stem of channels[0] (no
    bias) -> bn -> act, one stage per channels entry of `blocks` basic blocks each followed by
    the activation, the first block of every stage after the first at stride 2 (3x3 convs
    padded by 1: 28 -> 14 -> 7), global average pooling. Returns (layers, features)."""
    act, channels = m.get("activation", "relu"), m.get("channels", [32, 64])
    layers = [nn.Conv2d(c, channels[0], 3, 1, 1, bias=False), batch_norm(channels[0]), activation(act)]
    c = channels[0]
    for s, width in enumerate(channels):
        for k in range(m.get("blocks", 1)):
            layers += [BasicBlock(c, width, 2 if s > 0 and k == 0 else 1, act), activation(act)]
            c = width
    layers.append(nn.AdaptiveAvgPool2d(1))
    return layers, c


def build_model(m, in_shape, classes):
    layers = []
    c, h, w = in_shape
    if m["kind"] not in ("mlp", "cnn", "resnet"):
        raise SystemExit(f"model.kind {m['kind']!r} is not supported by this reference (mlp, cnn, resnet)")
    if m.get("init", "kaiming_uniform") != "kaiming_uniform":
        # PyTorch's default initialization is codistill's kaiming_uniform; others are not mirrored.
        raise SystemExit(f"model.init {m['init']!r} is not supported by this reference (kaiming_uniform)")
    if m["kind"] == "resnet":
        trunk, c = resnet_trunk(m, c)
        layers += trunk
        h = w = 1
    elif m["kind"] == "cnn":
        k, pool = m.get("kernel_size", 5), m.get("pool", 2)
        for out in m.get("channels", [32, 64]):
            layers += [nn.Conv2d(c, out, k, padding=k // 2), activation(m.get("activation", "relu")),
                       nn.MaxPool2d(pool)]
            c, h, w = out, h // pool, w // pool
    layers.append(nn.Flatten())
    features = c * h * w
    for width in m.get("hidden", [256, 256] if m["kind"] != "cnn" else [128]):
        layers += [nn.Linear(features, width), activation(m.get("activation", "relu"))]
        if m.get("dropout", 0.0) > 0:
            layers.append(nn.Dropout(m["dropout"]))
        features = width
    layers.append(nn.Linear(features, classes))
    return nn.Sequential(*layers)


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, help="override train.steps")
    ap.add_argument("--threads", type=int, help="override run.threads")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:K]")
    ap.add_argument("--batch", type=int, help="override data.batch_size")
    ap.add_argument("--data-path", help="override data.path")
    ap.add_argument("--tf32", action="store_true", help="cuda: allow TF32 (default: train.allow_tf32)")
    ap.add_argument("--memory-format", choices=("contiguous", "channels_last"),
                    help="layout of the model's and the batches' 4-d tensors (default: channels_last for "
                         "resnet on the CPU, contiguous otherwise; see the docstring)")
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    steps = args.steps or cfg["train"]["steps"]
    threads = args.threads or cfg["run"].get("threads", 2)
    torch.set_num_threads(threads)
    torch.manual_seed(cfg["run"].get("seed", 1))
    data = cfg["data"]
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    tf32 = bool(args.tf32 or cfg["train"].get("allow_tf32", False))
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    train_x, train_y, test_x, test_y = load_fmnist(args.data_path or data.get("path", "/usr/share/datasets/fashion-mnist"))
    if cuda:
        train_x, train_y, test_x, test_y = (t.to(device) for t in (train_x, train_y, test_x, test_y))
    model = build_model(cfg["model"], (1, 28, 28), 10).to(device)
    if args.memory_format is None:
        args.memory_format = "channels_last" if cfg["model"]["kind"] == "resnet" and not cuda else "contiguous"
    memory_format = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}[args.memory_format]
    model = model.to(memory_format=memory_format)
    o = cfg["optimizer"]
    if o["kind"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o.get("momentum", 0.9),
                              nesterov=o.get("nesterov", False), weight_decay=o.get("weight_decay", 0.0))
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                                eps=o.get("eps", 1e-8), weight_decay=o.get("weight_decay", 0.0))
    loss_fn = nn.CrossEntropyLoss()
    batch = args.batch or data.get("batch_size", 128)
    n = train_x.shape[0]
    gen = torch.Generator().manual_seed(cfg["run"].get("seed", 1))
    perm, cursor = torch.randperm(n, generator=gen).to(device), 0
    model.train()
    train_s = 0.0
    if cuda:
        torch.cuda.synchronize(device)
        loop_start = time.perf_counter()
    for step in range(steps):
        if cursor + batch > n:
            perm, cursor = torch.randperm(n, generator=gen).to(device), 0
        idx = perm[cursor:cursor + batch]
        cursor += batch
        t = time.perf_counter()
        x, y = train_x[idx].contiguous(memory_format=memory_format), train_y[idx]
        for g in opt.param_groups:
            g["lr"] = lr_at(o, step, steps)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        train_s += time.perf_counter() - t
    if cuda:  # the GPU runs behind the host: time the whole loop
        torch.cuda.synchronize(device)
        train_s = time.perf_counter() - loop_start
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for i in range(0, test_x.shape[0], 1000):
            out = model(test_x[i:i + 1000].contiguous(memory_format=memory_format))
            loss_sum += nn.functional.cross_entropy(out, test_y[i:i + 1000], reduction="sum").item()
            correct += (out.argmax(1) == test_y[i:i + 1000]).sum().item()
    print(json.dumps({
        "impl": "pytorch", "torch": torch.__version__, "threads": threads, "steps": steps, "batch": batch,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu", "tf32": tf32 if cuda else None,
        "train_examples_per_s": steps * batch / train_s, "train_s": train_s,
        "test_accuracy": correct / test_x.shape[0], "test_loss": loss_sum / test_x.shape[0],
        "memory_format": args.memory_format}))


if __name__ == "__main__":
    sys.exit(main())
