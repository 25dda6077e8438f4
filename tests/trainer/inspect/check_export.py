"""Runs the three exports of one checkpoint (scripts/export_model.py) over an MNIST-format
test set and compares them with `codistill-inspect eval --predictions`: prints one JSON
object for test_export_process.cpp to judge (it does the asserting).

  check_export.py --checkpoint CKPT --predictions CSV --images IDX.gz --labels IDX.gz
                  --torch FILE --onnx FILE --safetensors FILE

torch: torch.jit.load; onnx: onnxruntime; safetensors: read with the PyPI safetensors
library, its tensors compared with the checkpoint's bit for bit, then loaded into the
model rebuilt from the file's own metadata and run.
"""
import argparse
from collections import OrderedDict
import gzip
import json
import os
import struct
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts"))
from codistill_export import models  # noqa: E402


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def probabilities(logits):
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def batched(fn, x, batch=1000):
    return np.concatenate([fn(x[i:i + batch]) for i in range(0, len(x), batch)])


def compare(name, probs, reference, report):
    report.setdefault(name, {}).update({"max_abs_diff": float(np.abs(probs - reference["probs"]).max()),
                                        "argmax_mismatches": int((probs.argmax(axis=1) != reference["predicted"]).sum())})


def check_safetensors(path, ckpt_path, x, report):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    tensors = load_file(path)
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
    with h5py.File(ckpt_path, "r", locking=False) as f:
        model_yaml = f.attrs["model"]
        model_yaml = model_yaml.decode() if isinstance(model_yaml, bytes) else model_yaml
        stored = {}
        for section in ("params", "buffers"):
            if section in f:
                f[section].visititems(lambda n, o: stored.__setitem__(n.replace("/", "."), o[()])
                                      if isinstance(o, h5py.Dataset) else None)
        shift, scale = f["state/data/normalization"][()]
    extra = {"input_norm.shift", "input_norm.inv_scale"}
    st = report["safetensors"] = {
        "names_match": set(tensors) == set(stored) | extra,
        "values_identical": all(k in tensors and tensors[k].dtype == np.float32 and
                                np.array_equal(tensors[k], v) for k, v in stored.items()),
        "normalization_identical": bool(tensors.get("input_norm.shift") == shift and
                                        tensors.get("input_norm.inv_scale") == 1.0 / scale),
        "metadata_model_identical": meta.get("model") == model_yaml,
    }
    # Enough to rebuild: the model from the metadata, the weights from the tensors.
    import yaml
    cfg = models.model_config(yaml.safe_load(meta["model"]), path)
    children = models.BUILDERS[cfg["kind"]](cfg)
    module = torch.nn.Sequential(OrderedDict(
        [(models.NORMALIZE_NAME, models.Normalize(float(meta["input_shift"]), float(meta["input_scale"])))]
        + children)).eval()
    module.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    st["fingerprint_matches"] = models.fingerprint(module, cfg["kind"]) == meta["model_fingerprint"]
    with torch.no_grad():
        return batched(lambda b: module(torch.from_numpy(b)).numpy(), x)


def main():
    p = argparse.ArgumentParser()
    for name in ("checkpoint", "predictions", "images", "labels", "torch", "onnx", "safetensors"):
        p.add_argument("--" + name, required=True)
    a = p.parse_args()
    torch.set_num_threads(1)

    x = read_idx(a.images).astype(np.float32)[:, None, :, :]  # raw pixels [N, 1, H, W]
    labels = read_idx(a.labels).astype(np.int64)
    csv = np.loadtxt(a.predictions, delimiter=",", skiprows=1, ndmin=2)
    reference = {"probs": csv[:, 3:], "predicted": csv[:, 2].astype(np.int64)}
    report = {"examples": len(x), "labels_match": bool(len(csv) == len(x) and
                                                      np.array_equal(csv[:, 1].astype(np.int64), labels)),
              "reference_accuracy": float((reference["predicted"] == labels).mean())}

    extra = {"codistill.json": ""}
    scripted = torch.jit.load(a.torch, _extra_files=extra)
    with torch.no_grad():
        compare("torch", probabilities(batched(lambda b: scripted(torch.from_numpy(b)).numpy(), x)), reference, report)
    report["torch"]["metadata_step"] = json.loads(extra["codistill.json"])["step"]

    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(a.onnx, options, providers=["CPUExecutionProvider"])
    compare("onnx", probabilities(batched(lambda b: session.run(["logits"], {"input": b})[0], x)), reference, report)
    report["onnx"]["metadata_step"] = session.get_modelmeta().custom_metadata_map.get("step")

    compare("safetensors", probabilities(check_safetensors(a.safetensors, a.checkpoint, x, report)), reference,
            report)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
