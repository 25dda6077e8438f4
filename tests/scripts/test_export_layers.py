"""scripts/codistill_export/layers.py, the exporter's twin of model kind `layers`: module
names and shapes as in C++ (tests/codistill/models/test_layers_model.cpp), the automatic
residual projections, the fingerprint over parameters and module paths (the same string
the C++ test hashes), and lists that cannot be built refused naming the entry. The
end-to-end check against codistill-inspect is tests/trainer/inspect/test_export_process.cpp."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

support.require_tools()

from collections import OrderedDict  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

from codistill_export import models  # noqa: E402
from codistill_export.errors import ExportError  # noqa: E402

# Entries as the C++ schema prints them: every argument written out.
CONV = {"conv2d": {"out_channels": 4, "kernel": 3, "stride": 1, "padding": 1, "bias": True}}
BN = {"batchnorm": {"eps": 1.0e-05, "momentum": 0.1}}


def conv(out, stride=1, pad=1, bias=True):
    return {"conv2d": {"out_channels": out, "kernel": 3, "stride": stride, "padding": pad, "bias": bias}}


def linear(out, bias=True):
    return {"linear": {"out": out, "bias": bias}}


def build(layers, input_shape=(1, 8, 8), classes=3):
    cfg = models.model_config({"kind": "layers", "layers": layers, "input_shape": list(input_shape),
                               "classes": classes}, "test.h5")
    return nn.Sequential(OrderedDict(models.BUILDERS["layers"](cfg))).eval()


def fnv(text):
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


class LayersKind(unittest.TestCase):
    def test_names_and_shapes_follow_the_list(self):
        m = build([CONV, BN, {"relu": {}}, {"maxpool": {"window": 2, "stride": 2}}, {"flatten": {}},
                   {"dropout": {"p": 0.2}}, linear(3)])
        self.assertEqual([n for n, _ in m.named_children()],
                         ["0_conv2d", "1_batchnorm", "2_relu", "3_maxpool", "4_flatten", "5_dropout", "6_linear"])
        shapes = {k: list(v.shape) for k, v in m.state_dict().items()}
        self.assertEqual(shapes["0_conv2d.weight"], [4, 1, 3, 3])
        self.assertEqual(shapes["6_linear.weight"], [3, 64])
        self.assertIn("1_batchnorm.running_var", shapes)
        self.assertEqual(list(m(torch.zeros(2, 1, 8, 8)).shape), [2, 3])

    def test_residual_shortcuts(self):
        m = build([CONV,
                   {"residual": {"layers": [CONV, {"relu": {}}]}},
                   {"residual": {"layers": [conv(6, stride=2)]}},
                   {"global_avg_pool": {}},
                   {"residual": {"layers": [linear(5), {"gelu": {}}]}},
                   {"layernorm": {"eps": 1.0e-05}},
                   linear(3)])
        shapes = {k: list(v.shape) for k, v in m.state_dict().items()}
        self.assertFalse(any(k.startswith("1_residual.shortcut") for k in shapes))
        self.assertEqual(shapes["2_residual.shortcut.0_conv2d.weight"], [6, 4, 1, 1])
        self.assertNotIn("2_residual.shortcut.0_conv2d.bias", shapes)
        self.assertIn("2_residual.shortcut.1_batchnorm.running_mean", shapes)
        self.assertEqual(shapes["4_residual.shortcut.0_linear.weight"], [5, 6])
        self.assertEqual(list(m(torch.zeros(2, 1, 8, 8)).shape), [2, 3])

    def test_fingerprint_covers_module_paths(self):
        m = build([{"flatten": {}}, {"gelu": {}}, linear(3)], input_shape=(4,))
        expected = fnv("2_linear/weight:[3, 4];2_linear/bias:[3];0_flatten;1_gelu;2_linear;")
        self.assertEqual(models.fingerprint(m, "layers"), expected)
        relu = build([{"flatten": {}}, {"relu": {}}, linear(3)], input_shape=(4,))
        self.assertNotEqual(models.fingerprint(relu, "layers"), expected)
        # The other kinds hash parameters only.
        self.assertEqual(models.fingerprint(m), fnv("2_linear/weight:[3, 4];2_linear/bias:[3];"))

    def test_lists_that_cannot_be_built_name_the_entry(self):
        cases = [
            ([CONV, linear(3)], "model.layers[1]: linear gets input [4, 8, 8]"),
            ([{"flatten": {}}, CONV], "model.layers[1]: conv2d gets input [64]"),
            ([{"flatten": {}}, linear(4)], "must end in [3]"),
            ([{"dense": {}}], "model.layers[0]: unknown layer type 'dense'"),
            ([{"linear": {"out": 3}}], "model.layers[0].linear: missing key(s) bias"),
            ([{"relu": {"inplace": True}}], "unknown key(s) inplace"),
            ([{"residual": {"layers": [{"flatten": {}}]}}], "of another rank"),
            ([{"residual": {"layers": [{"relu": {}}, linear(3)]}}], "model.layers[0].residual.layers[1]: linear"),
        ]
        for layers, says in cases:
            with self.subTest(layers=layers):
                with self.assertRaises(ExportError) as e:
                    build(layers)
                self.assertIn(says, str(e.exception))


if __name__ == "__main__":
    support.main(LayersKind)
