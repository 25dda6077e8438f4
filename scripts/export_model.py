#!/usr/bin/env python3
"""Exports a codistill checkpoint's model to PyTorch (TorchScript), ONNX or safetensors.

    .venv-tools/bin/python scripts/export_model.py CKPT --format torch|onnx|safetensors -o FILE [--force]

The model is rebuilt from the checkpoint's own `model` attribute (scripts/codistill_export/
models.py), its parameters and buffers loaded and checked against the model fingerprint.
The exported model takes raw inputs [batch, C, H, W] float32 (Fashion-MNIST: pixel values
0..255): the input normalization stored in the checkpoint is its first layer. It returns
logits [batch, classes]. Formats: scripts/codistill_export/writers.py and docs/after-training.md, "Export".
Exit codes: 0 written, 1 bad input or a failed export (one line on stderr), 2 usage error.
An existing FILE is only replaced with --force; FILE never exists half-written.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from codistill_export.errors import ExportError  # noqa: E402

FORMATS = ("torch", "onnx", "safetensors")
PROG = "export_model.py"


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        print(f"{PROG}: usage error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def parse_args(argv):
    p = Parser(prog=PROG, description="Export a codistill checkpoint's model (the model is rebuilt from the "
               "checkpoint's model attribute; inputs are raw values, normalized inside the model).")
    p.add_argument("checkpoint", metavar="CKPT", help="a checkpoint file (ckpt-<step>.h5)")
    p.add_argument("--format", required=True, help="torch (TorchScript), onnx or safetensors")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    args = p.parse_args(argv)
    if args.format not in FORMATS:
        p.error(f"unknown format '{args.format}' (valid: {', '.join(FORMATS)})")
    return args


def check_output(path, force):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ExportError(f"{path}: folder {folder} does not exist")
    if os.path.isdir(path):
        raise ExportError(f"{path}: is a folder")
    if os.path.lexists(path) and not force:
        raise ExportError(f"{path}: exists (use --force to replace it)")


def metadata(ckpt, cfg):
    shape = ", ".join(str(d) for d in cfg["input_shape"])
    meta = {
        "format": "codistill.export",
        "format_version": "1",
        "source": ckpt.path,
        "worker": str(ckpt.worker),
        "step": str(ckpt.step),
        "model_kind": cfg["kind"],
        "model": ckpt.model_yaml,
        "model_fingerprint": ckpt.fingerprint,
        "output": f"logits [batch, {cfg['classes']}] float32 (softmax gives the class probabilities)",
    }
    if ckpt.normalization is None:
        meta["input"] = f"[batch, {shape}] float32, as training saw them (the checkpoint stores no normalization)"
    else:
        meta["input"] = (f"[batch, {shape}] float32 raw values (IDX images: pixels 0..255), normalized inside "
                         "the model: (x - input_shift) / input_scale")
        meta["input_shift"], meta["input_scale"] = (repr(v) for v in ckpt.normalization)
    return meta


def publish(tmp, path, force):
    """tmp -> path: replaces only with force; otherwise fails if path appeared meanwhile."""
    if force:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise ExportError(f"{path}: exists (use --force to replace it)") from None
    os.unlink(tmp)


def export(args):
    from codistill_export.checkpoint import read_checkpoint

    check_output(args.output, args.force)
    ckpt = read_checkpoint(args.checkpoint)
    try:
        import torch
    except ImportError:
        raise ExportError("PyTorch is missing: run scripts/setup.sh --tools and use .venv-tools/bin/python") from None
    from codistill_export.models import rebuild
    from codistill_export.writers import WRITERS

    module, cfg = rebuild(ckpt)
    example = torch.zeros([2] + list(cfg["input_shape"]), dtype=torch.float32)
    folder, name = os.path.split(os.path.abspath(args.output))
    tmp = os.path.join(folder, f".{name}.tmp.{os.getpid()}")
    try:
        WRITERS[args.format](module, metadata(ckpt, cfg), example, tmp)
        publish(tmp, args.output, args.force)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(f"{args.output}: {args.format} export of {ckpt.path} ({cfg['kind']}, step {ckpt.step}, "
          f"{sum(p.numel() for p in module.parameters())} parameters)")


def main(argv):
    args = parse_args(argv)
    try:
        export(args)
    except ExportError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a failure inside torch or a writer: still one line
        print(f"{PROG}: error: {args.format} export of {args.checkpoint} failed: {type(e).__name__}: "
              f"{' '.join(str(e).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
