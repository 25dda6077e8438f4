// load_dataset: the config's data kind to the two splits, limited and normalized.
#include <filesystem>
#include <stdexcept>

#include "codistill/data/arrays.hpp"
#include "codistill/data/byte_codes.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/idx.hpp"
#include "codistill/data/synthetic.hpp"

namespace codistill::data {

namespace fs = std::filesystem;

namespace {

// The files of kind idx are relative to data.path unless absolute.
std::string resolve(const std::string& dir, const std::string& file) {
  fs::path p(file);
  return p.is_absolute() ? p.string() : (fs::path(dir) / p).string();
}

void check_same_example_shape(const Splits& s) {
  if (s.train.example_shape() != s.test.example_shape())
    throw std::runtime_error("data: test examples have shape " + kernels::shape_str(s.test.example_shape()) +
                             " but training examples have shape " + kernels::shape_str(s.train.example_shape()));
}

}  // namespace

Splits load_dataset(const DataConfig& cfg) {
  // Checked up front, so that a typo fails before seconds of loading.
  if (cfg.normalize != "standard" && cfg.normalize != "unit" && cfg.normalize != "none")
    throw std::invalid_argument("data.normalize: unknown value '" + cfg.normalize + "' (valid: standard, unit, none)");
  if (cfg.train_limit < 0) throw std::invalid_argument("data.train_limit: must be >= 0 (0 = all), got " +
                                                       std::to_string(cfg.train_limit));
  if (cfg.test_limit < 0) throw std::invalid_argument("data.test_limit: must be >= 0 (0 = all), got " +
                                                      std::to_string(cfg.test_limit));
  Splits s;
  double raw_max = 255.0;  // IDX pixels are unsigned bytes
  if (cfg.kind == "arrays") {
    s = load_arrays(cfg, raw_max);
    check_same_example_shape(s);
  } else if (cfg.kind == "fashion-mnist") {
    if (!fs::is_directory(cfg.path))
      throw std::runtime_error("data.path: '" + cfg.path + "' is not a folder (Fashion-MNIST ships as the Debian "
                               "package dataset-fashion-mnist, in /usr/share/datasets/fashion-mnist)");
    s.train = read_idx_dataset(resolve(cfg.path, "train-images-idx3-ubyte.gz"),
                               resolve(cfg.path, "train-labels-idx1-ubyte.gz"), 10, "fashion-mnist/train");
    s.test = read_idx_dataset(resolve(cfg.path, "t10k-images-idx3-ubyte.gz"),
                              resolve(cfg.path, "t10k-labels-idx1-ubyte.gz"), 10, "fashion-mnist/test");
    check_same_example_shape(s);
  } else if (cfg.kind == "idx") {
    s.train = read_idx_dataset(resolve(cfg.path, cfg.train_images), resolve(cfg.path, cfg.train_labels), 0,
                               "idx/train");
    s.test = read_idx_dataset(resolve(cfg.path, cfg.test_images), resolve(cfg.path, cfg.test_labels), 0,
                              "idx/test");
    check_same_example_shape(s);
    // Both splits must agree on the number of classes: the largest label seen anywhere.
    const std::int64_t classes = std::max(s.train.classes, s.test.classes);
    if (classes > 1000)
      throw std::runtime_error("data: labels go up to " + std::to_string(classes - 1) +
                               ", more than the 1000 classes supported");
    s.train.classes = s.test.classes = classes;
  } else if (cfg.kind == "synthetic") {
    s = make_synthetic(cfg);
    raw_max = 1.0;  // "unit" leaves synthetic values as they are
  } else if (is_token_data(cfg)) {
    // Tokens are not images: the text modality reads them (data/feed/lm_data.hpp).
    throw std::invalid_argument("data.kind: " + cfg.kind + " is a language-model corpus, not a labelled image "
                                "dataset (it is read by load_lm_data; image tools such as codistill-inspect eval do "
                                "not take it)");
  } else {
    throw std::invalid_argument("data.kind: unknown kind '" + cfg.kind + "' (valid: arrays, fashion-mnist, idx, synthetic)");
  }
  if (cfg.train_limit > 0) truncate(s.train, cfg.train_limit);
  if (cfg.test_limit > 0) truncate(s.test, cfg.test_limit);
  // A mapped dataset's values are byte codes already (Dataset::mapped).
  std::vector<std::uint8_t> train_codes, test_codes;
  if (!s.train.is_mapped()) train_codes = byte_codes(s.train);
  if (!s.test.is_mapped()) test_codes = byte_codes(s.test);
  normalize(s, cfg.normalize, raw_max);
  if (!s.train.is_mapped()) attach_codes(s.train, std::move(train_codes));
  if (!s.test.is_mapped()) attach_codes(s.test, std::move(test_codes));
  return s;
}

}  // namespace codistill::data
