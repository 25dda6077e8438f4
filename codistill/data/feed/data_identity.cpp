#include "codistill/data/feed/data_identity.hpp"

#include <glob.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "codistill/util/config_error.hpp"

namespace codistill {
namespace {

namespace fs = std::filesystem;

std::string join_path(const std::string& dir, const std::string& file) {
  return fs::path(file).is_absolute() ? file : (fs::path(dir) / file).string();
}

std::vector<std::string> files_of(const DataConfig& d) {
  if (d.kind == "fashion-mnist")
    return {join_path(d.path, "train-images-idx3-ubyte.gz"), join_path(d.path, "train-labels-idx1-ubyte.gz"),
            join_path(d.path, "t10k-images-idx3-ubyte.gz"), join_path(d.path, "t10k-labels-idx1-ubyte.gz")};
  if (d.kind == "idx")
    return {join_path(d.path, d.train_images), join_path(d.path, d.train_labels), join_path(d.path, d.test_images),
            join_path(d.path, d.test_labels)};
  if (d.kind == "arrays") {
    if (!fs::is_directory(d.path)) return {d.path};
    return {join_path(d.path, "train_x.npy"), join_path(d.path, "train_y.npy"), join_path(d.path, "test_x.npy"),
            join_path(d.path, "test_y.npy")};
  }
  if (d.kind == "text")
    return {join_path(d.path, "tokenizer.bpe"), join_path(d.path, "train.tokens"), join_path(d.path, "valid.tokens")};
  if (d.kind == "tokens") {
    std::vector<std::string> f = glob_files("data.train", d.train, d.path);
    for (std::string& v : glob_files("data.valid", d.valid, d.path)) f.push_back(std::move(v));
    return f;
  }
  return {};  // synthetic
}

void mix(XXH64_state_t* h, std::uint64_t v) { XXH64_update(h, &v, sizeof v); }

}  // namespace

std::vector<std::string> glob_files(const std::string& key, const std::string& pattern, const std::string& dir) {
  if (pattern.empty())
    throw ConfigError(key, "", 0, "data.kind tokens needs " + key + ": a glob of token shard files, e.g. "
                                  "'fineweb_train_*.bin'");
  const std::string full = join_path(dir, pattern);
  glob_t g{};
  const int rc = ::glob(full.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
    if (fs::is_regular_file(g.gl_pathv[i])) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (files.empty()) throw ConfigError(key, "", 0, "'" + full + "' matches no file");
  std::sort(files.begin(), files.end());
  return files;
}

DataIdentity identify_data(const DataConfig& d) {
  DataIdentity id;
  id.kind = d.kind;
  id.path = d.path;
  id.files = files_of(d);
  XXH64_state_t* h = XXH64_createState();
  XXH64_reset(h, 0);
  XXH64_update(h, d.kind.data(), d.kind.size());
  std::vector<char> head(64 * 1024);
  for (const std::string& f : id.files) {
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(f, ec);
    mix(h, ec ? ~std::uint64_t{0} : static_cast<std::uint64_t>(size));
    std::ifstream in(f, std::ios::binary);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    mix(h, XXH64(head.data(), static_cast<std::size_t>(in.gcount()), 0));
  }
  if (d.kind == "synthetic") {
    for (std::int64_t v : {d.synthetic_train, d.synthetic_test, static_cast<std::int64_t>(d.synthetic_classes),
                           static_cast<std::int64_t>(d.synthetic_seed)})
      mix(h, static_cast<std::uint64_t>(v));
    for (std::int64_t v : d.synthetic_shape) mix(h, static_cast<std::uint64_t>(v));
    XXH64_update(h, &d.synthetic_noise, sizeof d.synthetic_noise);
  }
  id.fingerprint = XXH64_digest(h);
  XXH64_freeState(h);
  return id;
}

}  // namespace codistill
