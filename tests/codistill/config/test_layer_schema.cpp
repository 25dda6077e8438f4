// model.layers (model kind `layers`): the strict layer schema — types, keys, defaults,
// ranges, nested residual lists — with errors naming the entry's path and line, the
// checks across model.kind and model.layers, and round trips through to_yaml and
// model_yaml (the checkpoint's model attribute).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "codistill/config/config_loader.hpp"
#include "codistill/config/layer_schema.hpp"
#include "config_test_util.hpp"

using namespace codistill;
using namespace codistill::test;

namespace {

const char* const kLayersConfig = R"(model:
  kind: layers
  layers:
    - conv2d: {out_channels: 8, kernel: 3, padding: 1}
    - batchnorm: {}
    - relu
    - maxpool: {window: 2}
    - residual:
        layers:
          - conv2d: {out_channels: 8, kernel: 3, padding: 1, bias: false}
          - gelu:
    - global_avg_pool: {}
    - dropout: {p: 0.25}
    - layernorm: {eps: 1e-6}
    - flatten: {}
    - linear: {out: 10, bias: false}
)";

std::string layers_yaml(const std::string& entries) { return "model:\n  kind: layers\n  layers:\n" + entries; }

}  // namespace

TEST_CASE("a layer list is read with every argument's default filled in", "[config][layers]") {
  const Config c = load_text(kLayersConfig);
  REQUIRE(c.model.kind == "layers");
  const auto& l = c.model.layers;
  REQUIRE(l.size() == 10);
  CHECK(l[0].type == "conv2d");
  CHECK(l[0].integer("out_channels") == 8);
  CHECK(l[0].integer("kernel") == 3);
  CHECK(l[0].integer("stride") == 1);  // default
  CHECK(l[0].integer("padding") == 1);
  CHECK(l[0].flag("bias"));  // default
  CHECK(l[1].number("eps") == 1e-5);
  CHECK(l[1].number("momentum") == 0.1);
  CHECK(l[2].type == "relu");  // a bare type name
  CHECK(l[2].args.empty());
  CHECK(l[3].integer("window") == 2);
  CHECK(l[3].integer("stride") == 2);  // defaults to the window
  REQUIRE(l[4].type == "residual");
  REQUIRE(l[4].layers.size() == 2);
  CHECK_FALSE(l[4].layers[0].flag("bias"));
  CHECK(l[4].layers[1].type == "gelu");  // "gelu:" with nothing after it
  CHECK(l[4].shortcut.empty());
  CHECK(l[6].number("p") == 0.25);
  CHECK(l[7].number("eps") == 1e-6);
  CHECK(l[9].integer("out") == 10);
  CHECK_FALSE(l[9].flag("bias"));
  CHECK(layer_text(l[0]) == "conv2d: {out_channels: 8, kernel: 3, stride: 1, padding: 1, bias: true}");
  CHECK(layer_text(l[2]) == "relu: {}");
}

TEST_CASE("an unknown layer type is rejected listing the valid ones", "[config][layers]") {
  ConfigError e = error_of(layers_yaml("    - relu: {}\n    - conv: {out_channels: 4, kernel: 3}\n"));
  CHECK(e.key_path() == "model.layers[1]");
  CHECK(e.line() == 5);
  CHECK(contains(e.detail(), "unknown layer type 'conv' (did you mean 'conv2d'?)"));
  CHECK(contains(e.detail(), "valid types: batchnorm, conv2d, dropout, flatten, gelu, global_avg_pool, layernorm, "
                             "linear, maxpool, relu, residual"));
  for (const auto& type : layer_types()) CHECK(contains(e.detail(), type));
}

TEST_CASE("an unknown or duplicate key of a layer names the entry, the key and its line", "[config][layers]") {
  ConfigError typo = error_of(layers_yaml("    - flatten: {}\n    - conv2d:\n        out_channels: 4\n        kernal: 3\n"));
  CHECK(typo.key_path() == "model.layers[1].conv2d.kernal");
  CHECK(typo.line() == 7);
  CHECK(contains(typo.detail(), "unknown key (did you mean 'kernel'?)"));
  CHECK(contains(typo.detail(), "valid keys of conv2d: out_channels, kernel, stride, padding, bias"));
  ConfigError none = error_of(layers_yaml("    - relu: {inplace: true}\n"));
  CHECK(none.key_path() == "model.layers[0].relu.inplace");
  CHECK(contains(none.detail(), "valid keys of relu: none"));
  ConfigError twice = error_of(layers_yaml("    - linear:\n        out: 4\n        out: 5\n"));
  CHECK(twice.key_path() == "model.layers[0].linear.out");
  CHECK(twice.line() == 6);
  CHECK(contains(twice.detail(), "duplicate key (first given on line 5)"));
}

TEST_CASE("missing required keys are all named", "[config][layers]") {
  ConfigError conv = error_of(layers_yaml("    - conv2d: {stride: 2}\n"));
  CHECK(conv.key_path() == "model.layers[0].conv2d");
  CHECK(conv.line() == 4);
  CHECK(contains(conv.detail(), "missing required keys out_channels, kernel"));
  struct Case {
    const char* entry;
    const char* key;
    const char* says;
  };
  const Case cases[] = {
      {"    - linear: {}\n", "model.layers[0].linear", "missing required key out"},
      {"    - linear\n", "model.layers[0].linear", "missing required key out"},
      {"    - maxpool: {stride: 1}\n", "model.layers[0].maxpool", "missing required key window"},
      {"    - dropout: {}\n", "model.layers[0].dropout", "missing required key p"},
      {"    - residual: {}\n", "model.layers[0].residual", "missing required key layers"},
  };
  for (const auto& c : cases) {
    INFO(c.entry);
    ConfigError e = error_of(layers_yaml(c.entry));
    CHECK(e.key_path() == c.key);
    CHECK(contains(e.detail(), c.says));
  }
}

TEST_CASE("a layer argument of the wrong type or out of range is an error at its key", "[config][layers]") {
  struct Case {
    const char* entry;
    const char* key;
    const char* says;
  };
  const Case cases[] = {
      {"    - conv2d: {out_channels: 4, kernel: 0}\n", "model.layers[0].conv2d.kernel", "expected an integer >= 1, got '0'"},
      {"    - conv2d: {out_channels: 4, kernel: 3, padding: -1}\n", "model.layers[0].conv2d.padding",
       "an integer >= 0"},
      {"    - conv2d: {out_channels: 4.5, kernel: 3}\n", "model.layers[0].conv2d.out_channels", "got '4.5'"},
      {"    - conv2d: {out_channels: 4, kernel: 3, bias: yes}\n", "model.layers[0].conv2d.bias",
       "expected true or false, got 'yes'"},
      {"    - linear: {out: [10]}\n", "model.layers[0].linear.out", "got a list"},
      {"    - dropout: {p: 1}\n", "model.layers[0].dropout.p", "expected a number in [0, 1), got '1'"},
      {"    - batchnorm: {momentum: 0}\n", "model.layers[0].batchnorm.momentum", "a number in (0, 1]"},
      {"    - layernorm: {eps: 0}\n", "model.layers[0].layernorm.eps", "a number > 0"},
      {"    - maxpool: {window: 2, stride: 0}\n", "model.layers[0].maxpool.stride", "an integer >= 1"},
      {"    - relu: 3\n", "model.layers[0].relu", "expected a mapping of arguments ({} for none), got '3'"},
      {"    - residual: {layers: []}\n", "model.layers[0].residual.layers", "a non-empty list of layers"},
      {"    - residual: {layers: [relu], shortcut: []}\n", "model.layers[0].residual.shortcut",
       "leave the key out for the default"},
      {"    - relu: {}\n      gelu: {}\n", "model.layers[0]", "expected one layer type per entry, got 2 keys (relu, gelu)"},
      {"    - [relu]\n", "model.layers[0]", "expected a layer"},
  };
  for (const auto& c : cases) {
    INFO(c.entry);
    ConfigError e = error_of(layers_yaml(c.entry));
    CHECK(e.key_path() == c.key);
    CHECK(contains(e.detail(), c.says));
  }
  ConfigError scalar = error_of("model:\n  kind: layers\n  layers: relu\n");
  CHECK(scalar.key_path() == "model.layers");
  CHECK(scalar.line() == 3);
  CHECK(contains(scalar.detail(), "expected a list of layers"));
}

TEST_CASE("an error inside a residual block's list names the nested entry", "[config][layers]") {
  ConfigError e = error_of(layers_yaml(
      "    - flatten: {}\n"
      "    - residual:\n"
      "        layers:\n"
      "          - linear: {out: 8}\n"
      "          - linear: {out: 8, bias: 2}\n"));
  CHECK(e.key_path() == "model.layers[1].residual.layers[1].linear.bias");
  CHECK(e.line() == 8);
  ConfigError shortcut = error_of(layers_yaml("    - residual: {layers: [relu], shortcut: [{pool: {}}]}\n"));
  CHECK(shortcut.key_path() == "model.layers[0].residual.shortcut[0]");
  CHECK(contains(shortcut.detail(), "unknown layer type 'pool'"));
}

TEST_CASE("model.kind layers and model.layers go together", "[config][layers]") {
  ConfigError empty = error_of("model:\n  kind: layers\n");
  CHECK(empty.key_path() == "model.kind");
  CHECK(empty.line() == 2);
  CHECK(contains(empty.detail(), "non-empty list of layers in model.layers"));
  ConfigError listed_empty = error_of("model:\n  kind: layers\n  layers: []\n");
  CHECK(listed_empty.key_path() == "model.layers");
  CHECK(listed_empty.line() == 3);
  ConfigError other = error_of("model:\n  kind: cnn\n  layers:\n    - linear: {out: 10}\n");
  CHECK(other.key_path() == "model.kind");
  CHECK(contains(other.detail(), "model.layers is set; it is read by model.kind layers only"));
  // An override can switch the kind back, together with the list.
  const Config back = load_text(kLayersConfig, {"model.kind=mlp", "model.layers=[]"});
  CHECK(back.model.kind == "mlp");
  CHECK(back.model.layers.empty());
}

TEST_CASE("model.layers given by --set is a flow list", "[config][layers]") {
  const Config c = load_text("model:\n  kind: layers\n  layers: [flatten]\n",
                             {"model.layers=[{flatten: {}}, {linear: {out: 10}}]"});
  REQUIRE(c.model.layers.size() == 2);
  CHECK(c.model.layers[1].integer("out") == 10);
  ConfigError e = error_of("model:\n  kind: mlp\n", {"model.kind=layers", "model.layers=[{linear: {out: x}}]"});
  CHECK(e.key_path() == "model.layers[0].linear.out");
  CHECK(e.file() == "--set");
  CHECK(e.line() == 0);
}

TEST_CASE("a layer list round-trips through to_yaml and model_yaml", "[config][layers]") {
  const Config c = load_text(kLayersConfig);
  const std::string text = to_yaml(c);
  CHECK(contains(text, "  layers:\n    - conv2d: {out_channels: 8, kernel: 3, stride: 1, padding: 1, bias: true}\n"
                       "    - batchnorm: {eps: 1.0e-05, momentum: 0.1}\n    - relu: {}\n"));
  CHECK(contains(text, "    - residual: {layers: [{conv2d: {out_channels: 8, kernel: 3, stride: 1, padding: 1, "
                       "bias: false}}, {gelu: {}}]}\n"));
  const Config back = load_text(text);
  CHECK(config_differences(back, c).empty());
  CHECK(back.model.layers == c.model.layers);

  ModelConfig m = c.model;
  m.layers[4].shortcut = m.layers[4].layers;  // an explicit shortcut prints too
  m.input_shape = {1, 28, 28};
  m.classes = 10;
  const std::string attr = model_yaml(m);
  CHECK(contains(attr, "\nlayers:\n  - conv2d: {"));
  CHECK(contains(attr, "shortcut: [{conv2d: "));
  const ModelConfig read = model_from_yaml(attr);
  CHECK(read.layers == m.layers);
  CHECK(read.classes == 10);

  // The other kinds' model attribute is what it was before model.layers existed.
  ModelConfig mlp;
  mlp.input_shape = {1, 8, 8};
  mlp.classes = 3;
  CHECK_FALSE(contains(model_yaml(mlp), "layers"));
  const Config defaults;
  CHECK(contains(to_yaml(defaults), "\n  layers: []\n"));
}
