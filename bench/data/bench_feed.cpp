// What reading a user's files costs a training step's batch preparation, side by side with
// the project's own formats, alternating round by round:
//   images: data::gather of a batch from Fashion-MNIST loaded from its IDX files and from the
//           same pixels as .npy files (data.kind arrays; --npy DIR, written by
//           tests/codistill/data/write_arrays.py);
//   tokens: a text batch source's windows from a prepared token file (data.kind text, --text
//           DIR made by codistill-prepare-text) and from the same token stream written here
//           as one llm.c shard (data.kind tokens).
//   bench_feed --npy DIR --text DIR [--batch 128] [--text-batch 16] [--context 128]
//              [--reps 2000] [--rounds 4] [--threads 2]
//   floors: what any format pays for an image batch on this machine, with the same threads
//           and random rows: the rows' bytes copied with nothing decoded (the reading), and a
//           float32 batch of that size stored with nothing read (the writing every format
//           that hands the model float32 inputs does).
// Prints the best and median microseconds per batch of each contender and a JSON line.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/feed/text_source.hpp"
#include "codistill/data/text/tokens/token_shard.hpp"
#include "kernels/backend.hpp"

using namespace codistill;
namespace text = data::text;

namespace {

struct Args {
  std::string npy, text_dir;
  std::int64_t batch = 128, text_batch = 16, context = 128;
  int reps = 2000, rounds = 4, threads = 2;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--npy") a.npy = v;
    else if (k == "--text") a.text_dir = v;
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--text-batch") a.text_batch = std::stoll(v);
    else if (k == "--context") a.context = std::stoll(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--rounds") a.rounds = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else throw std::invalid_argument("unknown argument " + k);
  }
  if (a.npy.empty() || a.text_dir.empty()) throw std::invalid_argument("--npy DIR and --text DIR are needed");
  return a;
}

// The prepared training stream (every document and its end-of-document token) as one shard.
std::string write_stream_as_shard(const text::TokenFile& f, const std::string& path) {
  std::vector<std::int32_t> all(static_cast<std::size_t>(f.tokens() + f.documents()));
  std::vector<std::int64_t> docs(static_cast<std::size_t>(f.documents()));
  for (std::size_t i = 0; i < docs.size(); ++i) docs[i] = static_cast<std::int64_t>(i);
  text::DocumentStream(f, docs).copy(0, all);
  text::write_llmc_shard(path, all);
  return path;
}

struct Contender {
  std::string name;
  std::function<void(std::int64_t rep)> run;
  std::vector<double> us;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    kernels::backend_for(kernels::DeviceKind::cpu).set_threads(a.threads);
    DataConfig idx_cfg, npy_cfg;
    npy_cfg.kind = "arrays";
    npy_cfg.path = a.npy;
    const data::Splits idx = data::load_dataset(idx_cfg), npy = data::load_dataset(npy_cfg);
    kernels::Tensor out = kernels::Tensor::empty({a.batch, 1, 28, 28}, kernels::DType::f32);
    std::vector<std::int32_t> labels;
    std::vector<std::int64_t> rows(static_cast<std::size_t>(a.batch));
    std::mt19937_64 rng(1);
    auto gather_from = [&](const data::Dataset& d) {
      for (auto& i : rows) i = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(d.size()));
      data::gather(d, rows, out, labels, /*parallel=*/true);
    };

    const text::TokenFile prepared(a.text_dir + "/train.tokens");
    const std::string shard_path =
        write_stream_as_shard(prepared, (std::filesystem::temp_directory_path() / "bench_feed_shard.bin").string());
    const text::TokenShard shard(shard_path, 0);
    text::WindowOptions wo;
    wo.batch_size = a.text_batch;
    wo.context = a.context;
    wo.mode = data::ShardMode::full;
    TextBatchSource from_text(prepared, wo);
    TextBatchSource from_shard(std::make_shared<text::ShardStream>(std::vector<const text::TokenShard*>{&shard}, 1),
                               prepared.info().vocab_size, wo);

    const std::uint8_t* bytes = idx.train.code_bytes();
    if (!bytes) throw std::runtime_error("the IDX training split has no byte codes");
    const std::int64_t row = idx.train.example_numel();
    std::vector<std::uint8_t> byte_rows(static_cast<std::size_t>(a.batch * row));
    auto bytes_only = [&] {
      for (auto& i : rows) i = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(idx.train.size()));
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < a.batch; ++i)
        std::memcpy(byte_rows.data() + i * row, bytes + rows[static_cast<std::size_t>(i)] * row,
                    static_cast<std::size_t>(row));
    };
    auto store_only = [&] {
      float* o = out.data<float>();
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < a.batch * row; ++i) o[i] = 1.0f;
    };
    std::vector<Contender> cs = {{"images from IDX", [&](std::int64_t) { gather_from(idx.train); }, {}},
                                 {"floor: byte rows, no decode", [&](std::int64_t) { bytes_only(); }, {}},
                                 {"floor: float32 batch store, no read", [&](std::int64_t) { store_only(); }, {}},
                                 {"images from .npy", [&](std::int64_t) { gather_from(npy.train); }, {}},
                                 {"tokens from prepared file", [&](std::int64_t r) { from_text.group_windows(r); }, {}},
                                 {"tokens from llm.c shard", [&](std::int64_t r) { from_shard.group_windows(r); }, {}}};
    std::printf("bench_feed: image batch %lld, text batch %lld x %lld tokens, %d threads, %d reps x %d rounds\n",
                static_cast<long long>(a.batch), static_cast<long long>(a.text_batch),
                static_cast<long long>(a.context + 1), a.threads, a.reps, a.rounds);
    for (int round = 0; round < a.rounds; ++round)
      for (Contender& c : cs)
        for (int rep = 0; rep < a.reps; ++rep) {
          const auto t0 = std::chrono::steady_clock::now();
          c.run(round * a.reps + rep);
          c.us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
    std::printf("{");
    for (std::size_t i = 0; i < cs.size(); ++i) {
      std::vector<double>& t = cs[i].us;
      std::sort(t.begin(), t.end());
      std::printf("%s\"%s\": {\"best_us\": %.2f, \"median_us\": %.2f}", i ? ", " : "", cs[i].name.c_str(), t.front(),
                  t[t.size() / 2]);
    }
    std::printf("}\n");
    std::filesystem::remove(shard_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_feed: %s\n", e.what());
    return 1;
  }
  return 0;
}
