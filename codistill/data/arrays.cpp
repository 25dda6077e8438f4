#include "codistill/data/arrays.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "checkpoint/array_file.hpp"
#include "codistill/data/mapped_file.hpp"
#include "codistill/data/npy.hpp"
#include "codistill/data/npz.hpp"

namespace codistill::data {
namespace {

namespace fs = std::filesystem;

// The four arrays of one container, by key.
class ArraySource {
 public:
  virtual ~ArraySource() = default;
  virtual RawArray get(const std::string& key) = 0;
};

class NpyFolder final : public ArraySource {
 public:
  explicit NpyFolder(std::string dir) : dir_(std::move(dir)) {}
  RawArray get(const std::string& key) override {
    const fs::path p = fs::path(dir_) / (key + ".npy");
    if (!fs::exists(p))
      throw std::runtime_error(p.string() + ": missing (data.kind arrays wants train_x.npy, train_y.npy, "
                               "test_x.npy and test_y.npy in data.path)");
    return read_npy(p.string());
  }

 private:
  std::string dir_;
};

class NpzSource final : public ArraySource {
 public:
  explicit NpzSource(const std::string& path) : npz_(path) {}
  RawArray get(const std::string& key) override { return npz_.array(key); }

 private:
  NpzFile npz_;
};

ArrayDtype dtype_from_name(const std::string& name) {
  for (ArrayDtype t : {ArrayDtype::u8, ArrayDtype::i8, ArrayDtype::u16, ArrayDtype::i16, ArrayDtype::u32,
                       ArrayDtype::i32, ArrayDtype::u64, ArrayDtype::i64, ArrayDtype::f16, ArrayDtype::bf16,
                       ArrayDtype::f32, ArrayDtype::f64})
    if (name == dtype_name(t)) return t;
  throw std::logic_error("no array dtype " + name);
}

class Hdf5Source final : public ArraySource {
 public:
  explicit Hdf5Source(std::string path) : path_(std::move(path)) {}
  RawArray get(const std::string& key) override {
    const std::vector<std::string> names = checkpoint::h5_array_names(path_);
    if (std::find(names.begin(), names.end(), key) == names.end()) {
      std::string have;
      for (const std::string& n : names) have += (have.empty() ? "" : ", ") + n;
      throw std::runtime_error(path_ + ": no dataset '" + key + "' at the root (it holds: " +
                               (have.empty() ? "nothing" : have) + ")");
    }
    checkpoint::H5Array h = checkpoint::read_h5_array(path_, key);
    RawArray a;
    a.origin = path_ + ": " + key;
    a.shape = h.shape;
    if (!h.supported) throw std::runtime_error(a.origin + ": unsupported element type " + h.dtype);
    a.dtype = dtype_from_name(h.dtype);
    const std::int64_t n = checked_numel(a.shape, dtype_bytes(a.dtype));
    if (n < 0) throw std::runtime_error(a.origin + ": shape " + a.shape_str() + " is too large");
    const std::size_t bytes = static_cast<std::size_t>(n * dtype_bytes(a.dtype));
    if (h.file_offset >= 0) {
      if (!map_) map_ = std::make_shared<MappedFile>(path_);
      if (static_cast<std::uint64_t>(h.file_offset) > map_->size() || bytes > map_->size() - h.file_offset)
        throw std::runtime_error(a.origin + ": truncated file (the dataset runs past its end)");
      a.bytes = map_->bytes().subspan(static_cast<std::size_t>(h.file_offset), bytes);
      a.keep = map_;
      a.mapped = true;
    } else {
      auto buf = std::make_shared<std::vector<std::uint8_t>>(std::move(h.bytes));
      a.bytes = std::span<const std::uint8_t>(buf->data(), buf->size());
      a.keep = buf;
    }
    return a;
  }

 private:
  std::string path_;
  std::shared_ptr<MappedFile> map_;
};

std::unique_ptr<ArraySource> open_source(const std::string& path) {
  if (fs::is_directory(path)) return std::make_unique<NpyFolder>(path);
  if (!fs::exists(path))
    throw std::runtime_error("data.path: '" + path + "' does not exist (data.kind arrays: a folder of .npy files, "
                             "an .npz archive or an HDF5 file)");
  char magic[8] = {};
  std::ifstream(path, std::ios::binary).read(magic, sizeof magic);
  if (std::memcmp(magic, "PK\x03\x04", 4) == 0 || std::memcmp(magic, "PK\x05\x06", 4) == 0)
    return std::make_unique<NpzSource>(path);
  if (std::memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0) return std::make_unique<Hdf5Source>(path);
  throw std::runtime_error("data.path: '" + path + "' is neither a folder of .npy files, an .npz archive nor an "
                           "HDF5 file");
}

[[noreturn]] void bad(const RawArray& a, const std::string& what) { throw std::runtime_error(a.origin + ": " + what); }

// The labels as int32 in [0, limit), and the largest one.
std::vector<std::int32_t> read_labels(const RawArray& y, std::int64_t limit, std::int64_t& largest) {
  if (!is_integer(y.dtype)) bad(y, std::string("labels must be integers, not ") + dtype_name(y.dtype));
  if (y.shape.size() != 1) bad(y, "labels must have shape (N,), not " + y.shape_str());
  std::vector<std::int32_t> out(static_cast<std::size_t>(y.shape[0]));
  for (std::int64_t i = 0; i < y.shape[0]; ++i) {
    const std::int64_t v = integer_at(y, i);
    if (v < 0 || v >= limit)
      bad(y, "label " + std::to_string(v) + " at index " + std::to_string(i) + " is outside [0, " +
                 std::to_string(limit) + ")" + (limit == 1000 ? " (at most 1000 classes)" : " (data.classes)"));
    out[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(v);
    largest = std::max(largest, v);
  }
  return out;
}

// [N, C, H, W] of x under the layout.
kernels::Shape image_shape(const RawArray& x, bool nhwc) {
  const auto& s = x.shape;
  switch (s.size()) {
    case 2: return {s[0], s[1], 1, 1};
    case 3: return {s[0], 1, s[1], s[2]};
    case 4: return nhwc ? kernels::Shape{s[0], s[3], s[1], s[2]} : kernels::Shape{s[0], s[1], s[2], s[3]};
    default: bad(x, "examples must have shape (N, F), (N, H, W) or (N, H, W, C) / (N, C, H, W), not " + x.shape_str());
  }
}

void fill_images(const RawArray& x, bool nhwc, Dataset& d) {
  const kernels::Shape s = image_shape(x, nhwc);
  d.images = allocate_images(s);
  float* dst = d.images.data<float>();
  const std::int64_t row = s[1] * s[2] * s[3], channels = s[1], pixels = s[2] * s[3];
  if (!nhwc || x.shape.size() != 4 || channels == 1) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < s[0]; ++i) to_float(x, i * row, row, dst + i * row);
    return;
  }
#pragma omp parallel
  {
    std::vector<float> hwc(static_cast<std::size_t>(row));
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < s[0]; ++i) {
      to_float(x, i * row, row, hwc.data());
      for (std::int64_t p = 0; p < pixels; ++p)
        for (std::int64_t c = 0; c < channels; ++c) dst[i * row + c * pixels + p] = hwc[p * channels + c];
    }
  }
}

Dataset make_split(const RawArray& x, const RawArray& y, const DataConfig& cfg, const std::string& name) {
  const std::int64_t limit = cfg.classes > 0 ? cfg.classes : 1000;
  std::int64_t largest = -1;
  Dataset d;
  d.name = name;
  d.labels = read_labels(y, limit, largest);
  if (x.dtype != ArrayDtype::u8 && is_integer(x.dtype))
    bad(x, std::string("unsupported dtype ") + dtype_name(x.dtype) +
               " for examples (valid: uint8, float16, bfloat16, float32, float64)");
  if (x.shape.empty() || x.shape[0] != y.shape[0])
    bad(x, "has " + (x.shape.empty() ? std::string("no examples") : std::to_string(x.shape[0]) + " examples") +
               " but " + y.origin + " has " + std::to_string(y.shape[0]) + " labels");
  if (x.shape[0] == 0) bad(x, "no examples");
  const bool nhwc = cfg.layout == "nhwc";
  if (x.dtype == ArrayDtype::u8 && x.mapped && !(nhwc && x.shape.size() == 4 && x.shape[3] > 1)) {
    // Bytes in [N, C, H, W] order already: train from the map (Dataset::mapped).
    d.mapped = x.bytes;
    d.mapped_keep = x.keep;
    d.mapped_shape = image_shape(x, nhwc);
  } else {
    fill_images(x, nhwc, d);
  }
  d.classes = cfg.classes > 0 ? cfg.classes : largest + 1;
  return d;
}

}  // namespace

Splits load_arrays(const DataConfig& cfg, double& raw_max) {
  if (cfg.layout != "nhwc" && cfg.layout != "nchw")
    throw std::invalid_argument("data.layout: unknown value '" + cfg.layout + "' (valid: nhwc, nchw)");
  std::unique_ptr<ArraySource> src = open_source(cfg.path);
  const RawArray train_x = src->get("train_x"), train_y = src->get("train_y");
  const RawArray test_x = src->get("test_x"), test_y = src->get("test_y");
  if (train_x.dtype != test_x.dtype)
    bad(test_x, std::string("dtype ") + dtype_name(test_x.dtype) + " differs from train_x's " +
                    dtype_name(train_x.dtype) + " (normalization needs one scale)");
  Splits s;
  s.train = make_split(train_x, train_y, cfg, "arrays/train");
  s.test = make_split(test_x, test_y, cfg, "arrays/test");
  s.train.classes = s.test.classes = std::max(s.train.classes, s.test.classes);
  raw_max = train_x.dtype == ArrayDtype::u8 ? 255.0 : 1.0;
  return s;
}

}  // namespace codistill::data
