"""PyTorch twins of codistill's models (codistill/models/build.cpp), rebuilt from a
checkpoint's `model` attribute.

A C++ model is a Sequential root whose children are named like its modules ("flatten",
"fc1", "act1", "drop1", "conv1", "pool1", ...); parameter paths are module paths
("fc1/weight"). A builder here returns the same children in the same order, so that
torch's state_dict keys are the checkpoint's names with '/' replaced by '.' and the
parameter order (which the model fingerprint hashes) is the C++ one. Layouts are
PyTorch's own: Linear weight [out, in], Conv2d weight [out, in, k, k], NCHW activations,
Flatten of NCHW in C, H, W order, so the tensors load as they are.

A new model kind is one function decorated with @model_kind("name") that takes the
model config (a dict with every key, defaults filled in) and returns a list of
(name, nn.Module) pairs; keys that kind reads and the C++ side knows go into DEFAULTS.
The `layers` kind (the model as a list of layers in the config) is in layers.py.
"""
from collections import OrderedDict

import torch
from torch import nn

from .errors import ExportError

# The ModelConfig keys (codistill/config/config.hpp) with their defaults: an older
# checkpoint may lack a key that a newer build writes. `init` does not change the
# architecture; input_shape and classes are always written.
DEFAULTS = {
    "kind": "mlp",
    "hidden": [256, 256],
    "channels": [32, 64],
    "kernel_size": 5,
    "pool": 2,
    "blocks": 1,
    "activation": "relu",
    "dropout": 0.0,
    "init": "kaiming_uniform",
    "layers": [],
    "input_shape": None,
    "classes": None,
}

BUILDERS = {}
# Kinds whose fingerprint also covers every module path (Model::set_fingerprint_modules).
FINGERPRINT_MODULES = set()


def model_kind(kind, fingerprint_modules=False):
    """Registers a builder: fn(cfg) -> [(name, nn.Module), ...] of the root's children."""
    def register(fn):
        BUILDERS[kind] = fn
        if fingerprint_modules:
            FINGERPRINT_MODULES.add(kind)
        return fn
    return register


def _positive(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def model_config(model, path):
    unknown = sorted(set(model) - set(DEFAULTS))
    if unknown:
        raise ExportError(f"{path}: model attribute has key(s) this exporter does not know: {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(DEFAULTS))})")
    cfg = dict(DEFAULTS, **model)
    if cfg["kind"] not in BUILDERS:
        raise ExportError(f"{path}: unknown model kind '{cfg['kind']}' (valid: {', '.join(sorted(BUILDERS))})")
    def sizes(key, allow_empty):
        v = cfg[key]
        if not isinstance(v, list) or (not v and not allow_empty) or not all(_positive(d) for d in v):
            raise ExportError(f"{path}: model attribute: {key} must be a list of sizes >= 1, got {v!r}")
    sizes("input_shape", False)
    sizes("hidden", True)
    sizes("channels", False)
    for key in ("classes", "kernel_size", "pool", "blocks"):
        if not _positive(cfg[key]):
            raise ExportError(f"{path}: model attribute: {key} must be >= 1, got {cfg[key]!r}")
    if not isinstance(cfg["dropout"], (int, float)) or not 0 <= cfg["dropout"] < 1:
        raise ExportError(f"{path}: model attribute: dropout must be in [0, 1), got {cfg['dropout']!r}")
    if cfg["activation"] not in ("relu", "gelu"):
        raise ExportError(f"{path}: unknown activation '{cfg['activation']}' (valid: gelu, relu)")
    return cfg


class _Layers:
    """Collects the root's children while tracking the per-example shape, like the C++
    Builder, so an impossible architecture fails naming the layer."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.children = []
        self.shape = list(cfg["input_shape"])
        self.count = {}

    def next_name(self, prefix):
        self.count[prefix] = self.count.get(prefix, 0) + 1
        return f"{prefix}{self.count[prefix]}"

    def push(self, name, module, shape):
        if any(d < 1 for d in shape):
            raise ExportError(f"model '{self.cfg['kind']}': layer '{name}': output {shape} would be empty")
        self.children.append((name, module))
        self.shape = shape

    def activation(self):
        act = nn.ReLU() if self.cfg["activation"] == "relu" else nn.GELU()  # GELU: exact erf form, as in C++
        self.push(self.next_name("act"), act, self.shape)

    def flatten(self):
        n = 1
        for d in self.shape:
            n *= d
        self.push("flatten", nn.Flatten(), [n])

    def classifier_head(self):
        """fcK -> actN (-> dropN) per hidden width, then the output layer."""
        for width in self.cfg["hidden"]:
            self.push(self.next_name("fc"), nn.Linear(self.shape[0], width), [width])
            self.activation()
            if self.cfg["dropout"] > 0:
                self.push(self.next_name("drop"), nn.Dropout(self.cfg["dropout"]), self.shape)
        self.push(self.next_name("fc"), nn.Linear(self.shape[0], self.cfg["classes"]), [self.cfg["classes"]])


@model_kind("mlp")
def build_mlp(cfg):
    b = _Layers(cfg)
    b.flatten()
    b.classifier_head()
    return b.children


@model_kind("cnn")
def build_cnn(cfg):
    if len(cfg["input_shape"]) != 3:
        raise ExportError(f"model 'cnn': input_shape must be [C, H, W], got {cfg['input_shape']}")
    b = _Layers(cfg)
    k, pool = cfg["kernel_size"], cfg["pool"]
    for block, channels in enumerate(cfg["channels"], start=1):
        c, h, w = b.shape
        pad = k // 2  # C++ Conv2d's 'same' padding (k odd; k even grows the map by one)
        b.push(f"conv{block}", nn.Conv2d(c, channels, k, stride=1, padding=pad),
               [channels, h + 2 * pad - k + 1, w + 2 * pad - k + 1])
        b.activation()
        c, h, w = b.shape
        if h < pool or w < pool:
            raise ExportError(f"model 'cnn': layer 'pool{block}': window {pool}x{pool} does not fit {b.shape}")
        b.push(f"pool{block}", nn.MaxPool2d(pool, stride=pool), [c, (h - pool) // pool + 1, (w - pool) // pool + 1])
    b.flatten()
    b.classifier_head()
    return b.children


class BatchNorm(nn.Module):
    """codistill's BatchNorm in evaluation: the running statistics (eps 1e-5). Not
    torch.nn.BatchNorm2d, whose extra buffer num_batches_tracked the checkpoint lacks."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                        training=False, momentum=0.0, eps=self.eps)


class Residual(nn.Module):
    """y = body(x) + shortcut(x), the shortcut the identity when None (codistill/nn/residual)."""

    def __init__(self, body: nn.Module, shortcut=None):
        super().__init__()
        self.body = body
        self.shortcut = shortcut if shortcut is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + self.shortcut(x)


class GlobalAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


def _act(cfg):
    return nn.ReLU() if cfg["activation"] == "relu" else nn.GELU()


@model_kind("resnet")
def build_resnet(cfg):
    """build_resnet in codistill/models/build.cpp: stem conv3x3 + bn + act, stages of
    basic blocks (the first block of every stage after the first at stride 2, a 1x1 conv +
    bn projection where the shape changes), each followed by the activation, global
    average pooling, the classifier head."""
    if len(cfg["input_shape"]) != 3:
        raise ExportError(f"model 'resnet': input_shape must be [C, H, W], got {cfg['input_shape']}")
    b = _Layers(cfg)
    c, h, w = b.shape
    stem = cfg["channels"][0]
    b.push("stem", nn.Conv2d(c, stem, 3, stride=1, padding=1, bias=False), [stem, h, w])
    b.push("stem_bn", BatchNorm(stem), b.shape)
    b.activation()
    for s, width in enumerate(cfg["channels"], start=1):
        for k in range(1, cfg["blocks"] + 1):
            c, h, w = b.shape
            stride = 2 if s > 1 and k == 1 else 1
            body = nn.Sequential(OrderedDict([
                ("conv1", nn.Conv2d(c, width, 3, stride=stride, padding=1, bias=False)),
                ("bn1", BatchNorm(width)),
                ("act1", _act(cfg)),
                ("conv2", nn.Conv2d(width, width, 3, stride=1, padding=1, bias=False)),
                ("bn2", BatchNorm(width)),
            ]))
            shortcut = None
            if stride != 1 or c != width:
                shortcut = nn.Sequential(OrderedDict([
                    ("conv", nn.Conv2d(c, width, 1, stride=stride, padding=0, bias=False)),
                    ("bn", BatchNorm(width)),
                ]))
            b.push(f"stage{s}_block{k}", Residual(body, shortcut), [width, (h - 1) // stride + 1, (w - 1) // stride + 1])
            b.activation()
    b.push("pool", GlobalAvgPool(), [b.shape[0]])
    b.classifier_head()
    return b.children


class Normalize(nn.Module):
    """Maps raw inputs the way training did (codistill/data: (x - shift) * (1 / scale)
    in float64, rounded once to float32), so the exported model takes raw values."""

    def __init__(self, shift: float, scale: float):
        super().__init__()
        self.register_buffer("shift", torch.tensor(shift, dtype=torch.float64))
        self.register_buffer("inv_scale", torch.tensor(1.0 / scale, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x.to(torch.float64) - self.shift) * self.inv_scale).to(torch.float32)


NORMALIZE_NAME = "input_norm"


def fingerprint(module, kind=None):
    """codistill's Model::fingerprint: FNV-1a 64 over "path:[d0, d1];" per parameter, then,
    for a kind in FINGERPRINT_MODULES, over "path;" per module in pre-order (C++ has no
    module for an identity shortcut; the exporter's own input normalization is not the
    checkpoint's)."""
    texts = [name.replace(".", "/") + ":[" + ", ".join(str(d) for d in p.shape) + "];"
             for name, p in module.named_parameters()]
    if kind in FINGERPRINT_MODULES:
        texts += [name.replace(".", "/") + ";" for name, m in module.named_modules()
                  if name and name.split(".")[0] != NORMALIZE_NAME and not isinstance(m, nn.Identity)]
    h = 0xCBF29CE484222325
    for byte in "".join(texts).encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _load(root, ckpt, kind):
    params = {n for n, _ in root.named_parameters()}
    buffers = {n for n, _ in root.named_buffers()}
    given = {}
    for section, tensors, expected in (("parameter", ckpt.params, params), ("buffer", ckpt.buffers, buffers)):
        for name, value in tensors.items():
            key = name.replace("/", ".")
            if key not in expected:
                raise ExportError(f"{ckpt.path}: checkpoint {section} {name} has no place in the rebuilt {kind} model")
            given[key] = torch.from_numpy(value)
    state = root.state_dict()
    for key, value in state.items():
        if key not in given:
            what = "parameter" if key in params else "buffer"
            raise ExportError(f"{ckpt.path}: the rebuilt {kind} model needs {what} {key.replace('.', '/')}, "
                              "the checkpoint lacks it")
        if tuple(given[key].shape) != tuple(value.shape):
            raise ExportError(f"{ckpt.path}: {key.replace('.', '/')} has shape {list(given[key].shape)} in the "
                              f"checkpoint, the rebuilt {kind} model needs {list(value.shape)}")
    root.load_state_dict(given, strict=True)


def rebuild(ckpt):
    """The checkpoint's model in PyTorch, weights and buffers loaded, in eval mode, with
    the input normalization first when the checkpoint stores one. Returns (module, cfg)."""
    cfg = model_config(ckpt.model, ckpt.path)
    children = BUILDERS[cfg["kind"]](cfg)
    root = nn.Sequential(OrderedDict(children))
    _load(root, ckpt, cfg["kind"])
    # Names and shapes agree; the fingerprint also checks their order (the C++ one).
    if fingerprint(root, cfg["kind"]) != ckpt.fingerprint:
        raise ExportError(f"{ckpt.path}: the {cfg['kind']} model rebuilt from the model attribute has fingerprint "
                          f"{fingerprint(root, cfg['kind'])}, the checkpoint says {ckpt.fingerprint}")
    if ckpt.normalization is not None:
        if any(name == NORMALIZE_NAME for name, _ in children):
            raise ExportError(f"{ckpt.path}: a layer is named '{NORMALIZE_NAME}', which the exporter uses itself")
        shift, scale = ckpt.normalization
        root = nn.Sequential(OrderedDict([(NORMALIZE_NAME, Normalize(shift, scale))] + children))
    return root.eval(), cfg


from . import layers  # noqa: E402,F401  (registers the "layers" kind; it uses the classes above)
