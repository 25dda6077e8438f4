"""The export formats. Each writer takes the rebuilt module (eval mode, input
normalization first when the checkpoint has one), the metadata (a dict of strings), an
example input and the path to write.

  torch        TorchScript (torch.jit.script): torch.jit.load(FILE) gives a runnable module
               with state_dict() and parameters, no codistill code needed; the metadata
               is the extra file "codistill.json" (torch.jit.load(FILE, _extra_files=...)).
  onnx         torch.onnx.export, opset ONNX_OPSET, input "input" [batch, ...] float32,
               output "logits", dynamic batch; metadata in the model's metadata_props.
  safetensors  the state_dict (float32 parameters; float64 input_norm.shift and
               input_norm.inv_scale), metadata in "__metadata__"; written here from the
               format's specification (8-byte little-endian header size, JSON header, data).
"""
import json
import struct

import numpy as np
import torch

ONNX_OPSET = 17  # the newest torch 1.13 exports; onnxruntime >= 1.13 runs it


def write_torch(module, meta, example, path):
    scripted = torch.jit.script(module)
    # The script must compute what the module computes (a TorchScript-incompatible layer
    # would be caught by script() itself; this catches a silent difference).
    with torch.no_grad():
        if not torch.equal(scripted(example), module(example)):
            raise RuntimeError("TorchScript module disagrees with the rebuilt module")
    torch.jit.save(scripted, path, _extra_files={"codistill.json": json.dumps(meta, indent=2)})


def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _metadata_props(meta):
    """ModelProto.metadata_props (field 14) entries as protobuf wire bytes. Appending
    fields to a serialized message is valid protobuf, so no onnx package is needed."""
    out = bytearray()
    for key, value in meta.items():
        k, v = key.encode(), value.encode()
        entry = b"\x0a" + _varint(len(k)) + k + b"\x12" + _varint(len(v)) + v  # key = 1, value = 2
        out += b"\x72" + _varint(len(entry)) + entry  # field 14, length-delimited
    return bytes(out)


def write_onnx(module, meta, example, path):
    torch.onnx.export(module, (example,), path, opset_version=ONNX_OPSET, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      do_constant_folding=True)
    with open(path, "ab") as f:
        f.write(_metadata_props(meta))


SAFETENSORS_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}


def write_safetensors(module, meta, example, path):
    header = {"__metadata__": meta}
    blobs, offset = [], 0
    for name, tensor in module.state_dict().items():
        a = tensor.detach().cpu().contiguous().numpy()
        data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


WRITERS = {"torch": write_torch, "onnx": write_onnx, "safetensors": write_safetensors}
