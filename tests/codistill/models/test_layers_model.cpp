// Model kind `layers`: a model built from its YAML layer list — names, shapes, parameter
// counts, residual shortcuts, shape errors naming the entry, the fingerprint over the
// layer list, equality with the `cnn` kind it can spell out, round trips through the
// checkpoint's model attribute, and a whole-model gradient check in double.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codistill/config/config_loader.hpp"
#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"
#include "model_test_util.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::model_test;
using Catch::Matchers::Contains;

namespace {

// A model section with the given layers (YAML block-sequence lines) and data shape.
ModelConfig layers_config(const std::string& layers, const std::string& input_shape = "[1, 8, 8]", int classes = 3) {
  return model_from_yaml("kind: layers\nlayers:\n" + layers + "input_shape: " + input_shape +
                         "\nclasses: " + std::to_string(classes) + "\n");
}

Model build(const ModelConfig& cfg, std::uint64_t seed = 1) {
  Rng rng(seed);
  return build_model(cfg, rng);
}

std::vector<std::string> child_names(Model& m) {
  std::vector<std::string> out;
  for (const auto& [name, child] : m.root().children()) out.push_back(name);
  return out;
}

std::vector<std::pair<std::string, Shape>> param_shapes(Model& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (auto& p : m.params()) out.emplace_back(p.path, p.value->shape());
  return out;
}

// The ConfigError that building cfg throws; fails the test when there is none.
ConfigError build_error(const ModelConfig& cfg) {
  try {
    build(cfg);
  } catch (const ConfigError& e) {
    return e;
  }
  FAIL("expected a ConfigError");
  throw std::logic_error("unreachable");
}

const char* const kSmallCnn =
    "  - conv2d: {out_channels: 4, kernel: 3, padding: 1}\n"
    "  - batchnorm: {}\n"
    "  - relu: {}\n"
    "  - maxpool: {window: 2}\n"
    "  - flatten: {}\n"
    "  - dropout: {p: 0.2}\n"
    "  - linear: {out: 3}\n";

}  // namespace

TEST_CASE("a layer list builds one named module per entry with inferred shapes", "[models][layers]") {
  Model m = build(layers_config(kSmallCnn));
  CHECK(child_names(m) == std::vector<std::string>{"0_conv2d", "1_batchnorm", "2_relu", "3_maxpool", "4_flatten",
                                                   "5_dropout", "6_linear"});
  CHECK(param_shapes(m) == std::vector<std::pair<std::string, Shape>>{{"0_conv2d/weight", {4, 1, 3, 3}},
                                                                      {"0_conv2d/bias", {4}},
                                                                      {"1_batchnorm/weight", {4}},
                                                                      {"1_batchnorm/bias", {4}},
                                                                      {"6_linear/weight", {3, 64}},
                                                                      {"6_linear/bias", {3}}});
  CHECK(m.num_params() == 4 * 9 + 4 + 4 + 4 + 3 * 64 + 3);
  CHECK(m.buffers().size() == 2);  // the batchnorm's running statistics
  CHECK(m.rngs().size() == 1);     // the dropout's mask stream
  CHECK(m.forward(random_input({5, 1, 8, 8}, 1), true).shape() == Shape{5, 3});
  CHECK_THAT(m.summary(), Contains("[4, 4, 4]"));
}

TEST_CASE("residual entries: identity, automatic projection, explicit shortcut", "[models][layers]") {
  Model m = build(layers_config(
      "  - conv2d: {out_channels: 4, kernel: 3, padding: 1}\n"
      "  - residual: {layers: [{conv2d: {out_channels: 4, kernel: 3, padding: 1}}, {relu: {}}]}\n"
      "  - residual: {layers: [{conv2d: {out_channels: 6, kernel: 3, stride: 2, padding: 1}}]}\n"
      "  - residual: {layers: [{maxpool: {window: 2}}], shortcut: [{maxpool: {window: 2}}]}\n"
      "  - global_avg_pool: {}\n"
      "  - residual: {layers: [{linear: {out: 5}}, {gelu: {}}]}\n"
      "  - layernorm: {}\n"
      "  - linear: {out: 3}\n"));
  std::vector<std::string> paths;
  for (auto& p : m.params()) paths.push_back(p.path);
  CHECK(std::count(paths.begin(), paths.end(), "1_residual/body/0_conv2d/weight") == 1);
  CHECK(std::none_of(paths.begin(), paths.end(), [](const std::string& p) { return p.rfind("1_residual/shortcut", 0) == 0; }));
  // [4, 8, 8] -> [6, 4, 4]: a 1x1 convolution at stride 2 and a batchnorm.
  const auto shapes = param_shapes(m);
  CHECK(std::count(shapes.begin(), shapes.end(),
                   std::pair<std::string, Shape>{"2_residual/shortcut/0_conv2d/weight", {6, 4, 1, 1}}) == 1);
  CHECK(std::count(paths.begin(), paths.end(), "2_residual/shortcut/0_conv2d/bias") == 0);
  std::vector<std::string> buffers;
  for (auto& b : m.buffers()) buffers.push_back(b.path);
  CHECK(buffers == std::vector<std::string>{"2_residual/shortcut/1_batchnorm/running_mean",
                                            "2_residual/shortcut/1_batchnorm/running_var"});
  // Flat [6] -> [5]: a bias-free linear.
  CHECK(std::count(shapes.begin(), shapes.end(),
                   std::pair<std::string, Shape>{"5_residual/shortcut/0_linear/weight", {5, 6}}) == 1);
  CHECK(std::count(shapes.begin(), shapes.end(), std::pair<std::string, Shape>{"6_layernorm/weight", {5}}) == 1);
  CHECK(m.forward(random_input({2, 1, 8, 8}, 3), true).shape() == Shape{2, 3});
}

TEST_CASE("a layer that does not fit its input is named by index, type and shape", "[models][layers]") {
  struct Case {
    const char* layers;
    const char* key;
    std::vector<const char*> says;
  };
  const Case cases[] = {
      {"  - conv2d: {out_channels: 4, kernel: 3}\n  - relu: {}\n  - linear: {out: 3}\n", "model.layers[2]",
       {"linear gets input [4, 6, 6]", "put a flatten"}},
      {"  - conv2d: {out_channels: 4, kernel: 9}\n  - flatten: {}\n  - linear: {out: 3}\n", "model.layers[0]",
       {"conv2d gets input [1, 8, 8]", "kernel 9 is larger than the input's 8x8 plane"}},
      {"  - conv2d: {out_channels: 4, kernel: 11, padding: 1}\n  - flatten: {}\n  - linear: {out: 3}\n",
       "model.layers[0]", {"padded 10x10 plane (padding 1)"}},
      {"  - maxpool: {window: 4}\n  - maxpool: {window: 4}\n  - flatten: {}\n  - linear: {out: 3}\n",
       "model.layers[1]", {"maxpool gets input [1, 2, 2]", "window 4"}},
      {"  - flatten: {}\n  - conv2d: {out_channels: 4, kernel: 3}\n", "model.layers[1]",
       {"needs an image [C, H, W]", "cannot follow a flatten"}},
      {"  - global_avg_pool: {}\n  - global_avg_pool: {}\n", "model.layers[1]", {"needs an image"}},
      {"  - flatten: {}\n  - linear: {out: 4}\n", "model.layers[1]",
       {"the last layer (linear) gives [4]", "must end in [3]", "linear: {out: 3}"}},
      {"  - conv2d: {out_channels: 3, kernel: 8}\n", "model.layers[0]", {"gives [3, 1, 1]", "must end in [3]"}},
      {"  - residual: {layers: [{flatten: {}}]}\n", "model.layers[0]",
       {"residual gets input [1, 8, 8]", "another rank", "shortcut list"}},
      {"  - residual: {layers: [{conv2d: {out_channels: 2, kernel: 3}}]}\n", "model.layers[0]",
       {"give [2, 6, 6]", "no strided 1x1 projection"}},
      {"  - residual: {layers: [{relu: {}}], shortcut: [{maxpool: {window: 2}}]}\n", "model.layers[0]",
       {"its layers give [1, 8, 8] but its shortcut gives [1, 4, 4]"}},
      {"  - residual: {layers: [{relu: {}}, {linear: {out: 3}}]}\n", "model.layers[0].residual.layers[1]",
       {"linear gets input [1, 8, 8]"}},
  };
  for (const auto& c : cases) {
    INFO(c.layers);
    ConfigError e = build_error(layers_config(c.layers));
    CHECK(e.key_path() == c.key);
    for (const char* part : c.says) CHECK_THAT(e.what(), Contains(part));
  }
}

TEST_CASE("the fingerprint of a layer list covers every layer, parameterless ones too", "[models][layers]") {
  Model m = build(layers_config("  - flatten: {}\n  - gelu: {}\n  - linear: {out: 3}\n", "[4]"));
  // Independent computation of the documented format: parameters, then module paths.
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : std::string("2_linear/weight:[3, 4];2_linear/bias:[3];0_flatten;1_gelu;2_linear;")) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  CHECK(m.fingerprint() == hex);
  const auto fp = [](const char* layers) { return build(layers_config(layers, "[4]")).fingerprint(); };
  CHECK(fp("  - flatten: {}\n  - relu: {}\n  - linear: {out: 3}\n") != m.fingerprint());
  CHECK(fp("  - flatten: {}\n  - linear: {out: 3}\n") != m.fingerprint());
  // Weights and training-only arguments do not change which tensors there are.
  CHECK(build(layers_config(kSmallCnn), 7).fingerprint() == build(layers_config(kSmallCnn), 8).fingerprint());
  std::string other_p = kSmallCnn;
  other_p.replace(other_p.find("p: 0.2"), 6, "p: 0.5");
  CHECK(build(layers_config(other_p)).fingerprint() == build(layers_config(kSmallCnn)).fingerprint());
}

TEST_CASE("a layer list spelling out the cnn kind computes what the cnn computes", "[models][layers]") {
  ModelConfig cnn;
  cnn.kind = "cnn";
  cnn.channels = {4, 8};
  cnn.hidden = {16};
  cnn.input_shape = {1, 12, 12};
  cnn.classes = 5;
  const ModelConfig listed = layers_config(
      "  - conv2d: {out_channels: 4, kernel: 5, padding: 2}\n  - relu: {}\n  - maxpool: {window: 2}\n"
      "  - conv2d: {out_channels: 8, kernel: 5, padding: 2}\n  - relu: {}\n  - maxpool: {window: 2}\n"
      "  - flatten: {}\n  - linear: {out: 16}\n  - relu: {}\n  - linear: {out: 5}\n",
      "[1, 12, 12]", 5);
  Model a = build(cnn, 3), b = build(listed, 4);
  REQUIRE(a.num_params() == b.num_params());
  auto pa = a.params(), pb = b.params();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(pa[i].value->shape() == pb[i].value->shape());
    std::memcpy(pb[i].value->raw(), pa[i].value->raw(), pa[i].value->nbytes());
  }
  const Tensor x = random_input({3, 1, 12, 12}, 5);
  const std::vector<double> ya = values(a.forward(x, false));
  CHECK(test::max_rel_error(values(b.forward(x, false)), ya) < 1e-6);
}

TEST_CASE("a layers model rebuilt from its model attribute is the same model", "[models][layers]") {
  const ModelConfig cfg = layers_config(kSmallCnn);
  const ModelConfig back = model_from_yaml(model_yaml(cfg), "attribute");
  CHECK(back.layers == cfg.layers);
  Model a = build(cfg, 11), b = build(back, 11);
  CHECK(a.fingerprint() == b.fingerprint());
  auto pa = a.params(), pb = b.params();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i)
    CHECK(std::memcmp(pa[i].value->raw(), pb[i].value->raw(), pa[i].value->nbytes()) == 0);
}

TEST_CASE("layers model gradients match finite differences (double)", "[models][layers][gradcheck]") {
  const auto seed = test::fresh_seed();
  INFO("seed " << seed);
  // Smooth activations (no kink for a difference to straddle); batchnorm in training mode,
  // both residual shortcuts, dropout with its mask held fixed.
  Model m = build(layers_config(
                      "  - conv2d: {out_channels: 2, kernel: 3, padding: 1, bias: false}\n"  // a bias before a
                      "  - batchnorm: {}\n"  // batchnorm would get no gradient at all
                      "  - gelu: {}\n"
                      "  - residual: {layers: [{conv2d: {out_channels: 2, kernel: 3, padding: 1}}, {gelu: {}}]}\n"
                      "  - residual: {layers: [{conv2d: {out_channels: 3, kernel: 3, stride: 2, padding: 1}}]}\n"
                      "  - global_avg_pool: {}\n"
                      "  - layernorm: {}\n"
                      "  - dropout: {p: 0.25}\n"
                      "  - linear: {out: 4}\n"
                      "  - gelu: {}\n"
                      "  - linear: {out: 3}\n",
                      "[1, 6, 6]"),
                  seed);
  check_model_gradients(m, {3, 1, 6, 6}, seed);
}
