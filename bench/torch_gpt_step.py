#!/usr/bin/env python3
"""PyTorch side (CPU, or --device cuda) of bench/run_gpt_step_bench.sh: one training step of the model of
codistill's `gpt` kind (codistill/models/gpt_model.hpp), written out in plain torch.nn.

Same architecture: learned token and position embeddings, `layers` pre-LayerNorm blocks
(x + proj(attn(qkv(LN(x)))), x + fc2(GELU(fc1(LN(x)))) with exact-erf GELU, LayerNorm eps
1e-5, biases on every Linear but the head), a final LayerNorm and a head Linear(D, V) without
bias (tied to the token embedding with --tied). Causal attention is written out (scores,
mask, softmax, weighted sum): torch 1.13 has no scaled_dot_product_attention. No dropout.
Same step: forward of int32 tokens [B, T], mean cross-entropy over the B*T rows, backward,
AdamW (lr 3e-4, weight decay 0.1, betas 0.9/0.999, eps 1e-8). Random tokens drawn once.
--gelu tanh: GELU's tanh form (GPT-2's). --dtype bf16: the forward under CPU autocast to
bfloat16 (its matrix products in bf16 with float32 weights and optimizer state: mixed
precision, as codistill's train.precision bf16). The JSON line carries the peak resident
memory (ru_maxrss, MiB) at the end, and on CUDA the peak allocated device memory.
--attention sdpa: F.scaled_dot_product_attention(is_causal=True) (PyTorch 2.x: its fused
flash / memory-efficient kernels) instead of the written-out softmax. --compile: the model
under torch.compile (PyTorch 2.x; its compile time is in the warm-up steps, not the timed ones).
Prints one JSON line with the fields of bench_gpt_step (contender "pytorch").
    /usr/bin/python3 bench/torch_gpt_step.py [--B 8] [--T 128] ... [--threads 2]
"""
import argparse
import contextlib
import json
import math
import resource
import time

import torch
from torch import nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    gelu = "none"
    sdpa = False

    def forward(self, x, mask):
        B, T, D = x.shape
        hd = D // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
            y = p @ v
        y = y.transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=self.gelu))


class GPT(nn.Module):
    def __init__(self, V, T, D, heads, layers, tied):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block(D, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        if tied:
            self.head.weight = self.wte.weight
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(self.ln_f(x)).view(B * T, -1)


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(B=8, T=128, D=128, heads=4, layers=4, V=8192, threads=2, steps=10, warmup=2).items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--gelu", default="erf", choices=["erf", "tanh"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bf16"])
    p.add_argument("--device", default="cpu", help="cpu | cuda (float32, no TF32: the matmuls as codistill's)")
    p.add_argument("--attention", default="math", choices=["math", "sdpa"])
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    if a.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        p.error("--attention sdpa needs PyTorch 2.x (torch %s has no scaled_dot_product_attention)" % torch.__version__)
    if a.compile and not hasattr(torch, "compile"):
        p.error("--compile needs PyTorch 2.x (torch %s has no torch.compile)" % torch.__version__)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    Block.gelu = "tanh" if a.gelu == "tanh" else "none"
    Block.sdpa = a.attention == "sdpa"
    autocast = (torch.autocast(dev.type, dtype=torch.bfloat16) if a.dtype == "bf16"
                else contextlib.nullcontext())
    model = GPT(a.V, a.T, a.D, a.heads, a.layers, a.tied).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    forward = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, a.V, (a.B, a.T), generator=g)
    y = torch.randint(0, a.V, (a.B * a.T,), generator=g)
    x, y = x.to(dev), y.to(dev)
    loss = None

    def step():
        nonlocal loss
        opt.zero_grad(set_to_none=False)
        with autocast:
            logits = forward(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        sync()

    for _ in range(a.warmup):
        step()
    ms = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms_sorted = sorted(ms)
    median, best = ms_sorted[len(ms) // 2], ms_sorted[0]
    params = sum(p.numel() for p in model.parameters())
    N = a.B * a.T
    matrix_params = params - a.T * a.D - (0 if a.tied else a.V * a.D)  # embeddings are gathers
    flops = 6.0 * matrix_params * N + 12.0 * a.layers * a.B * a.T * a.T * a.D
    print(json.dumps({"contender": "pytorch", "torch": torch.__version__, "B": a.B, "T": a.T, "D": a.D,
                      "heads": a.heads, "layers": a.layers, "V": a.V, "tied": a.tied, "threads": a.threads,
                      "device": a.device, "params": params, "step_ms_median": round(median, 3), "step_ms_best": round(best, 3),
                      "tokens_per_s": round(N / (median / 1e3), 1), "gflop_per_step": round(flops / 1e9, 3),
                      "gflops_at_median": round(flops / 1e9 / (median / 1e3), 1), "final_loss": round(loss.item(), 5),
                      "steps": a.steps, "warmup": a.warmup, "gelu": a.gelu, "dtype": a.dtype,
                      "attention": a.attention, "compile": a.compile,
                      "peak_device_mib": (round(torch.cuda.max_memory_allocated() / 2**20, 1)
                                          if dev.type == "cuda" else None),
                      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    main()
