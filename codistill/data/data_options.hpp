#pragma once
// The data section of the config (docs/config.md, `data`): what the data layer takes.
// The config layer (codistill/config) fills it from YAML.
#include <cstdint>
#include <string>
#include <vector>

namespace codistill {

// Training-time augmentation (codistill/data/augment.hpp): training batches only.
struct AugmentConfig {
  std::int64_t crop_padding = 0;  // random crop of the image padded by this many pixels; 0 = off
  bool flip = false;              // random horizontal flip (label-preserving for clothes, not digits)
};

struct DataConfig {
  std::string kind = "fashion-mnist";  // arrays | fashion-mnist | idx | synthetic | text | tokens
  // The dataset's folder; kind text: a folder made by codistill-prepare-text
  // (tokenizer.bpe, train.tokens, valid.tokens; docs/text-data.md).
  std::string path = "/usr/share/datasets/fashion-mnist";
  // kind arrays (data/arrays.hpp): path is a folder of train_x.npy, train_y.npy, test_x.npy
  // and test_y.npy, an .npz archive or an HDF5 file holding those keys.
  std::string layout = "nhwc";  // kind arrays, 4-D examples: nhwc (NumPy's images) | nchw
  std::int64_t classes = 0;     // kind arrays: the number of classes (0 = largest label + 1)
  // kind tokens (data/text/tokens/token_shard.hpp): file globs of llm.c or nanoGPT token shards,
  // relative to path unless absolute; token_dtype: auto (llm.c's header says) | uint16 |
  // uint32 (a headerless nanoGPT .bin).
  std::string train;
  std::string valid;
  std::string token_dtype = "auto";
  // kind idx: the four files (gzip or raw IDX), relative to path unless absolute.
  std::string train_images = "train-images-idx3-ubyte.gz";
  std::string train_labels = "train-labels-idx1-ubyte.gz";
  std::string test_images = "t10k-images-idx3-ubyte.gz";
  std::string test_labels = "t10k-labels-idx1-ubyte.gz";
  int batch_size = 128;
  // auto (none when a path names {worker} or {rank}, else disjoint) | disjoint | full | same |
  // none (worker_paths.hpp)
  std::string shard = "auto";
  std::string normalize = "standard";  // standard (dataset mean/std) | unit ([0,1]) | none
  std::int64_t train_limit = 0;  // use only the first N training examples (0 = all)
  std::int64_t test_limit = 0;   // likewise for the test split (kind text: held-out windows)
  // kind text: T, the tokens of context of each training and evaluation window (a window
  // holds T + 1 tokens: T inputs, T next-token targets). model.seq_len for a gpt.
  std::int64_t context = 128;
  // kind synthetic: a Gaussian mixture, one component per class.
  std::int64_t synthetic_train = 8192;
  std::int64_t synthetic_test = 2048;
  int synthetic_classes = 10;
  std::vector<std::int64_t> synthetic_shape = {1, 8, 8};
  double synthetic_noise = 1.0;  // std of each component around its mean
  std::uint64_t synthetic_seed = 7;  // the mixture itself, shared by all workers
  AugmentConfig augment;
  // Prepare the next training batch (gather + augmentation) on a helper thread while the
  // current step computes: auto | true | false (auto: on for a device, on the CPU only
  // when the step's threads leave a core free). The batches are the same either way.
  std::string prefetch = "auto";
};

// Language-model data (token windows, the text modality) rather than labelled examples.
inline bool is_token_data(const DataConfig& d) { return d.kind == "text" || d.kind == "tokens"; }

}  // namespace codistill
