#pragma once
// A model section of the config (docs/config.md, `model` and `worker_models`): what
// build_model takes. The config layer (codistill/config) fills it from YAML.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/models/layer_spec.hpp"

namespace codistill {

struct ModelConfig {
  std::string kind = "mlp";  // mlp | cnn | resnet | layers | gpt
  std::vector<std::int64_t> hidden = {256, 256};  // fully connected widths
  std::vector<std::int64_t> channels = {32, 64};  // cnn: conv output channels, one per block;
                                                  // resnet: the width of each stage
  std::int64_t blocks = 1;                         // resnet: basic blocks per stage; gpt: transformer blocks
  std::int64_t kernel_size = 5;                    // cnn: square kernel, 'same' padding
  std::int64_t pool = 2;                           // cnn: max-pool window and stride
  std::string activation = "relu";                 // relu | gelu
  std::string gelu = "erf";                        // erf | tanh: the form of every GELU of the model
  double dropout = 0.0;                            // before each hidden linear layer's output
  std::string init = "kaiming_uniform";            // kaiming_uniform | kaiming_normal | xavier_uniform
  std::vector<LayerSpec> layers;                   // layers: the whole model, layer by layer
  // gpt (codistill/models/gpt_model.hpp):
  std::int64_t vocab_size = 0;      // tokens; 0 = from the data (classes)
  std::int64_t seq_len = 128;       // T: the model takes int32 [B, T]
  std::int64_t d_model = 128;       // width of the token rows
  std::int64_t heads = 4;           // attention heads (divide d_model)
  std::int64_t mlp_ratio = 4;       // MLP hidden width = mlp_ratio * d_model
  bool tie_embeddings = false;      // true: the head reuses the token embedding (GPT-2)
  // Fine-tuning: a checkpoint file, or a worker or run directory (its freshest valid
  // checkpoint), whose parameters and buffers replace the initialization at step 0. Not
  // part of the architecture: not in model_fields(), so not in a checkpoint's `model`.
  std::string init_from;  // "" = off
  // How image maps lie in memory: auto | nchw | nhwc (Model::set_memory_format). Not part of
  // the architecture either: the parameters and checkpoints are the same in every format.
  std::string memory_format = "auto";
  // gpt: the attention core's kernel, materialized | flash (codistill/nn/layers/attention.hpp).
  // Not part of the architecture either: the same parameters, and results equal to rounding.
  std::string attention = "materialized";
  // Filled from the data, not from the config file:
  std::vector<std::int64_t> input_shape;  // [C, H, W]
  std::int64_t classes = 0;
};

}  // namespace codistill
