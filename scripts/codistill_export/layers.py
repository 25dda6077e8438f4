"""The `layers` model kind in PyTorch: the twin of codistill/models/layers_model.cpp.

The model attribute lists the layers, each a one-key mapping {type: {argument: value}}
with every argument written out (codistill/config/layer_schema.cpp prints them all).
Entry i is the root's child "<i>_<type>"; a residual entry holds "body" and, where the
body changes the shape, "shortcut" (the listed one, or the automatic projection: a
bias-free 1x1 convolution at the stride that gives the body's resolution and a
batchnorm, or a bias-free linear for flat inputs), numbered the same way inside. Shapes are
tracked through the list as in C++, so that a list that cannot be built fails naming
its entry rather than deep inside torch.
"""
from collections import OrderedDict

from torch import nn

from .errors import ExportError
from .models import BatchNorm, GlobalAvgPool, Residual, model_kind

# Arguments each type takes (the C++ schema's, which filled in every default).
ARGS = {
    "batchnorm": ("eps", "momentum"),
    "conv2d": ("out_channels", "kernel", "stride", "padding", "bias"),
    "dropout": ("p",),
    "flatten": (),
    "gelu": (),
    "global_avg_pool": (),
    "layernorm": ("eps",),
    "linear": ("out", "bias"),
    "maxpool": ("window", "stride"),
    "relu": (),
    "residual": ("layers", "shortcut"),
}
OPTIONAL = {"residual": ("shortcut",)}


def _entry(item, where):
    if isinstance(item, str):
        item = {item: {}}
    if not isinstance(item, dict) or len(item) != 1:
        raise ExportError(f"model attribute: {where}: expected one {{type: {{arguments}}}} mapping, got {item!r}")
    (kind, args), = item.items()
    if kind not in ARGS:
        raise ExportError(f"model attribute: {where}: unknown layer type '{kind}' (valid: {', '.join(sorted(ARGS))})")
    args = args or {}
    if not isinstance(args, dict):
        raise ExportError(f"model attribute: {where}.{kind}: expected a mapping of arguments, got {args!r}")
    unknown = sorted(set(args) - set(ARGS[kind]))
    missing = [a for a in ARGS[kind] if a not in args and a not in OPTIONAL.get(kind, ())]
    if unknown or missing:
        raise ExportError(f"model attribute: {where}.{kind}: " +
                          (f"unknown key(s) {', '.join(unknown)}" if unknown else f"missing key(s) {', '.join(missing)}") +
                          f" (this exporter knows {', '.join(ARGS[kind]) or 'none'})")
    return kind, args


def _slide(size, window, stride, pad):
    return (size + 2 * pad - window) // stride + 1


class _Builder:
    def __init__(self, cfg):
        self.cfg = cfg

    def fail(self, where, kind, shape, problem):
        raise ExportError(f"model 'layers': {where}: {kind} gets input {list(shape)}: {problem}")

    def sequence(self, items, where, shape):
        """[(name, module)] of a list and its output shape."""
        if not isinstance(items, list) or not items:
            raise ExportError(f"model attribute: {where}: expected a non-empty list of layers, got {items!r}")
        children = []
        for i, item in enumerate(items):
            at = f"{where}[{i}]"
            kind, args = _entry(item, at)
            module, shape = self.make(kind, args, at, shape)
            children.append((f"{i}_{kind}", module))
        return children, shape

    def make(self, kind, a, where, shape):
        def image():
            if len(shape) != 3:
                self.fail(where, kind, shape, "it needs an image [C, H, W]")
            return shape

        def fits(window, pad):
            if window > shape[1] + 2 * pad or window > shape[2] + 2 * pad:
                self.fail(where, kind, shape, f"window {window} is larger than the (padded) input")

        if kind == "conv2d":
            c, h, w = image()
            k, s, p = a["kernel"], a["stride"], a["padding"]
            fits(k, p)
            return (nn.Conv2d(c, a["out_channels"], k, stride=s, padding=p, bias=a["bias"]),
                    [a["out_channels"], _slide(h, k, s, p), _slide(w, k, s, p)])
        if kind == "maxpool":
            c, h, w = image()
            k, s = a["window"], a["stride"]
            fits(k, 0)
            return nn.MaxPool2d(k, stride=s), [c, _slide(h, k, s, 0), _slide(w, k, s, 0)]
        if kind == "global_avg_pool":
            return GlobalAvgPool(), [image()[0]]
        if kind == "linear":
            if len(shape) != 1:
                self.fail(where, kind, shape, "it needs a flat input [F]")
            return nn.Linear(shape[0], a["out"], bias=a["bias"]), [a["out"]]
        if kind == "batchnorm":
            return BatchNorm(shape[0], eps=float(a["eps"])), shape
        if kind == "layernorm":
            return nn.LayerNorm(shape[-1], eps=float(a["eps"])), shape
        if kind == "dropout":
            return nn.Dropout(float(a["p"])), shape
        if kind == "flatten":
            n = 1
            for d in shape:
                n *= d
            return nn.Flatten(), [n]
        if kind == "relu":
            return nn.ReLU(), shape
        if kind == "gelu":
            return nn.GELU(), shape  # exact erf form, as in C++
        return self.residual(a, where, shape)

    def residual(self, a, where, shape):
        body, out = self.sequence(a["layers"], f"{where}.residual.layers", shape)
        shortcut = None
        if a.get("shortcut"):
            children, short_out = self.sequence(a["shortcut"], f"{where}.residual.shortcut", shape)
            if short_out != out:
                self.fail(where, "residual", shape, f"its layers give {out} but its shortcut gives {short_out}")
            shortcut = nn.Sequential(OrderedDict(children))
        elif out != shape and len(shape) == 1 and len(out) == 1:
            shortcut = nn.Sequential(OrderedDict([("0_linear", nn.Linear(shape[0], out[0], bias=False))]))
        elif out != shape and len(shape) == 3 and len(out) == 3:
            strides = [s for s in range(1, max(shape[1], shape[2]) + 1)
                       if _slide(shape[1], 1, s, 0) == out[1] and _slide(shape[2], 1, s, 0) == out[2]]
            if not strides:
                self.fail(where, "residual", shape, f"its layers give {out}, which no strided 1x1 projection gives")
            shortcut = nn.Sequential(OrderedDict([
                ("0_conv2d", nn.Conv2d(shape[0], out[0], 1, stride=strides[0], padding=0, bias=False)),
                ("1_batchnorm", BatchNorm(out[0])),
            ]))
        elif out != shape:
            self.fail(where, "residual", shape, f"its layers give {out}, of another rank than the input")
        return Residual(nn.Sequential(OrderedDict(body)), shortcut), out


@model_kind("layers", fingerprint_modules=True)
def build_layers(cfg):
    children, out = _Builder(cfg).sequence(cfg["layers"], "model.layers", list(cfg["input_shape"]))
    if out != [cfg["classes"]]:
        raise ExportError(f"model 'layers': the last layer gives {out}; the model must end in [{cfg['classes']}]")
    return children
