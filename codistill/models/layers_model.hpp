#pragma once
// Model kind `layers`: the model written down layer by layer in the config (model.layers,
// Caffe's prototxt idea in YAML; the schema is codistill/config/layer_schema.hpp).
//
// Entry i of the list becomes the root's child "<i>_<type>" ("0_conv2d", "1_batchnorm",
// "2_relu"), so parameter paths read "0_conv2d/weight"; a residual entry's body and
// shortcut lists are numbered the same way inside it ("4_residual/body/0_conv2d/weight").
// Shapes are inferred from cfg.input_shape through the list; a layer that does not fit
// its input (a linear after a conv without a flatten, a kernel larger than its padded
// input, ...) is a ConfigError whose key path names the entry, "model.layers[5]", and
// whose message names its type and input shape. The list must end in [classes]: no
// classifier is appended, the list is the whole model.
#include "codistill/models/model_options.hpp"

namespace codistill {

class Model;
class Rng;

// Appends cfg.layers to model's root, parameters initialized from rng in layer order
// (cfg.init), and makes the model's fingerprint cover every module path.
void build_layers(const ModelConfig& cfg, Rng& rng, Model& model);

}  // namespace codistill
