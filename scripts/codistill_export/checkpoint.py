"""Reads what an export needs from a codistill checkpoint (docs/checkpoint-format.md) with
h5py: the root attributes, /params, /buffers when present, and the input normalization
(/state/data/normalization). h5py checks every chunk's fletcher32 while reading; the
rebuilt model's fingerprint (models.py) checks names and shapes against the attribute."""
import os
from dataclasses import dataclass, field

import numpy as np
import yaml

from .errors import ExportError

FORMAT = "codistill.checkpoint"
FORMAT_VERSION = 1


@dataclass
class Checkpoint:
    path: str
    worker: int
    step: int
    model_yaml: str
    model: dict  # the model attribute, parsed
    fingerprint: str
    params: dict = field(default_factory=dict)  # "fc1/weight" -> float32 ndarray
    buffers: dict = field(default_factory=dict)
    # (shift, scale) applied to raw inputs in training, or None when the file has none
    normalization: tuple = None


def _text(value):
    # Fixed-length strings come back as bytes, variable-length ones (older files) as str.
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _attr(f, path, name):
    if name not in f.attrs:
        raise ExportError(f"{path}: not a codistill checkpoint (missing attribute {name})")
    return f.attrs[name]


def _tensors(f, path, section):
    """Every float32 dataset under /section, by name relative to it."""
    out = {}
    if section not in f:
        return out

    def take(name, obj):
        if not hasattr(obj, "dtype"):
            return  # a group
        if obj.dtype != np.float32:
            raise ExportError(f"{path}: dataset /{section}/{name} has type {obj.dtype}, expected float32")
        out[name] = np.ascontiguousarray(obj[()], dtype=np.float32)

    f[section].visititems(take)
    return out


def read_checkpoint(path):
    import h5py  # here, so that a usage error does not wait for it

    if not os.path.exists(path):
        raise ExportError(f"{path}: no such file")
    if not h5py.is_hdf5(path):
        raise ExportError(f"{path}: not a codistill checkpoint (not an HDF5 file)")
    try:
        with h5py.File(path, "r", locking=False) as f:
            fmt = _text(_attr(f, path, "format"))
            if fmt != FORMAT:
                raise ExportError(f"{path}: not a codistill checkpoint (format is '{fmt}', expected '{FORMAT}')")
            version = int(_attr(f, path, "format_version"))
            if version != FORMAT_VERSION:
                raise ExportError(f"{path}: unsupported format_version {version}")
            model_yaml = _text(_attr(f, path, "model"))
            ckpt = Checkpoint(path=path, worker=int(_attr(f, path, "worker")), step=int(_attr(f, path, "step")),
                              model_yaml=model_yaml, model=_parse_model(path, model_yaml),
                              fingerprint=_text(_attr(f, path, "model_fingerprint")))
            if "params" not in f:
                raise ExportError(f"{path}: not a codistill checkpoint (missing group /params)")
            ckpt.params = _tensors(f, path, "params")
            ckpt.buffers = _tensors(f, path, "buffers")
            if "state/data/normalization" in f:
                norm = np.asarray(f["state/data/normalization"][()], dtype=np.float64).reshape(-1)
                if norm.size == 2:
                    ckpt.normalization = (float(norm[0]), float(norm[1]))
            return ckpt
    except ExportError:
        raise
    except (OSError, KeyError, ValueError) as e:  # h5py's errors: a damaged chunk, a truncated file
        raise ExportError(f"{path}: cannot read: {' '.join(str(e).split())}") from None


def _parse_model(path, text):
    try:
        model = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ExportError(f"{path}: model attribute is not YAML: {' '.join(str(e).split())}") from None
    if not isinstance(model, dict) or "kind" not in model:
        raise ExportError(f"{path}: model attribute has no 'kind': {text!r}")
    return model
