// Fused distillation loss on a CUDA device, forward + backward with the gradient written in
// place over the student logits, float32 (kernels::cuda::distill_loss) and bf16
// (kernels::cuda::distill_loss_bf16), beside the device-to-device copy bandwidth measured
// in the same run (bench/run_loss_bench_cuda.sh runs it beside bench/torch_loss_cuda.py).
//   bench_loss_cuda [--n N] [--v V,V,..] [--k K,K,..] [--dtypes float32,bfloat16]
//                   [--warmup W] [--repeats R] [--copy-mib M] [--flush-mib M] [--device D]
//                   [--json PATH] [--grad-rows DIR] [--host]
//   bench_loss_cuda --gen-check DIR
// One timed call = one distill_loss call, which returns the loss on the host (one launch,
// the kernel and a stream synchronization): the wall time of that call, median over R
// calls after W warm-up calls. Before every call (untimed) the student is restored from a
// pristine copy (the previous call overwrote it with its gradient) and a --flush-mib buffer
// is cleared, so no call finds its inputs in L2. Bandwidth counts the compulsory traffic:
// (1 + K) reads and one write of N*V elements; "% copy" divides it by the bandwidth of a
// large device-to-device copy (bytes read + bytes written).
//
// Inputs come from a counter-based hash that bench/torch_loss_cuda.py reproduces bit for
// bit (logit_value below), so both sides time and check the very same numbers:
// each logit is (sum of the 4 bytes of mix32(index ^ key(buffer)) - 510) * 7/512, an
// Irwin-Hall bell shape of std 2.02 in [-6.97, 6.97], exactly representable in float32.
// --gen-check DIR writes a small generated input for torch_loss_cuda.py --gen-check to
// compare bit for bit (needs no GPU). --grad-rows DIR writes three gradient rows of every
// shape (from the first call) for torch_loss_cuda.py --grad-check to compare with a float64
// reference. --host runs the same program on the CPU fused loss (kernels::cpu, tiny sizes,
// for smoke tests of the whole pipeline on a machine without a GPU).
// No CUDA runtime call here: only the CUDA-free headers of kernels/cuda/.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/loss/distill_loss.hpp"
#include "kernels/cuda/loss/distill_loss.hpp"
#include "kernels/cuda/memory.hpp"

namespace cpu = codistill::kernels::cpu;
namespace cuda = codistill::kernels::cuda;
using Clock = std::chrono::steady_clock;

namespace {

// ---- the shared input generator (mirrored in bench/torch_loss_cuda.py) -----------------
constexpr std::uint32_t kMul1 = 0x21F0AAADu;
constexpr std::uint32_t kMul2 = 0x735A2D97u;
constexpr float kScale = 7.0f / 512.0f;   // exact in binary
constexpr std::uint32_t kLabelStream = 100;  // buffers: 0 student, 1..K teachers

std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= kMul1;
  x ^= x >> 15;
  x *= kMul2;
  x ^= x >> 15;
  return x;
}
std::uint32_t stream_key(std::uint32_t stream) { return mix32(0x01000193u * (stream + 1u)); }
float logit_value(std::uint32_t key, std::uint32_t index) {
  const std::uint32_t h = mix32(index ^ key);
  const int s = static_cast<int>(h & 255u) + static_cast<int>((h >> 8) & 255u) +
                static_cast<int>((h >> 16) & 255u) + static_cast<int>(h >> 24) - 510;
  return static_cast<float>(s) * kScale;  // |s| <= 510: exact
}
std::int32_t label_value(std::uint32_t row, std::int64_t V) {
  return static_cast<std::int32_t>(mix32(row ^ stream_key(kLabelStream)) % static_cast<std::uint32_t>(V));
}

void fill_logits(float* out, std::uint32_t stream, std::int64_t N, std::int64_t V) {
  const std::uint32_t key = stream_key(stream);
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < N; ++r)
    for (std::int64_t c = 0; c < V; ++c)
      out[r * V + c] = logit_value(key, static_cast<std::uint32_t>(r * V + c));
}

// Round to nearest even (inputs are finite): what torch's .to(torch.bfloat16) does.
std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
float from_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
void to_bf16(const float* in, std::uint16_t* out, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

// ---- where the buffers live: the CUDA device, or host memory for --host -----------------
struct Backend {
  bool host = false;
  int device = 0;

  void* alloc(std::size_t bytes) const {
    if (host) {
      void* p = std::malloc(bytes == 0 ? 1 : bytes);
      if (!p) throw std::bad_alloc();
      return p;
    }
    return cuda::device_malloc(bytes, device);
  }
  void free(void* p) const {
    if (host) std::free(p);
    else cuda::device_free(p, device);
  }
  void upload(void* dst, const void* src, std::size_t bytes) const {
    if (host) std::memcpy(dst, src, bytes);
    else cuda::memcpy_host_to_device(dst, src, bytes, device);
  }
  void download(void* dst, const void* src, std::size_t bytes) const {
    if (host) std::memcpy(dst, src, bytes);
    else cuda::memcpy_device_to_host(dst, src, bytes, device);
  }
  // Asynchronous on the device for device-to-device copies: call sync() before timing.
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (host) std::memcpy(dst, src, bytes);
    else cuda::memcpy_device_to_device(dst, src, bytes, device);
  }
  void clear(void* p, std::size_t bytes) const {
    if (host) std::memset(p, 0, bytes);
    else cuda::memset_zero(p, bytes, device);
  }
  void sync() const {
    if (!host) cuda::synchronize(device);
  }
};

// One device allocation, freed on scope exit.
class Buffer {
 public:
  Buffer(const Backend& b, std::size_t bytes) : b_(&b), p_(b.alloc(bytes)), bytes_(bytes) {}
  ~Buffer() { b_->free(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return p_; }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  const Backend* b_;
  void* p_;
  std::size_t bytes_;
};

// The host twin of distill_loss_bf16 for --host: bf16 in, float32 math, bf16 gradient out.
cpu::DistillLossResult host_loss_bf16(const std::uint16_t* student, const std::uint16_t* const* teachers,
                                      int K, const std::int32_t* labels, std::uint16_t* grad,
                                      std::int64_t N, std::int64_t V, const cpu::DistillLossParams& p) {
  std::vector<float> z(N * V), g(N * V);
  std::vector<std::vector<float>> t(K, std::vector<float>(N * V));
  std::vector<const float*> tp;
  for (std::int64_t i = 0; i < N * V; ++i) z[i] = from_bf16(student[i]);
  for (int k = 0; k < K; ++k) {
    for (std::int64_t i = 0; i < N * V; ++i) t[k][i] = from_bf16(teachers[k][i]);
    tp.push_back(t[k].data());
  }
  auto r = cpu::distill_loss<float>(z.data(), tp.data(), K, labels, g.data(), N, V, p);
  to_bf16(g.data(), grad, N * V);
  return r;
}

struct Options {
  std::int64_t N = 8192;
  std::vector<std::int64_t> Vs = {1000, 32768, 50304, 131072};
  std::vector<int> Ks = {1, 2, 4};
  std::vector<std::string> dtypes = {"float32", "bfloat16"};
  int warmup = 3, repeats = 20, device = 0;
  std::size_t copy_mib = 1024, flush_mib = 256;
  std::string json_path, grad_dir, gen_check_dir;
  bool host = false;
};

struct CopyResult {
  std::size_t bytes = 0;
  double median_ms = 0, gbs = 0;
};

// Device-to-device copy of copy_mib MiB, 4 back-to-back copies per sample, median of 20
// samples; bandwidth counts bytes read plus bytes written.
CopyResult measure_copy(const Backend& be, std::size_t bytes, const std::vector<float>& pattern) {
  Buffer src(be, bytes), dst(be, bytes);
  // Real data, not zeros: upload the pattern over the whole source.
  const std::size_t chunk = pattern.size() * sizeof(float);
  for (std::size_t off = 0; off < bytes; off += chunk)
    be.upload(src.as<char>() + off, pattern.data(), std::min(chunk, bytes - off));
  constexpr int kPerSample = 4, kSamples = 20;
  for (int i = 0; i < 3; ++i) be.copy(dst.get(), src.get(), bytes);
  be.sync();
  std::vector<double> ms;
  for (int s = 0; s < kSamples; ++s) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kPerSample; ++i) be.copy(dst.get(), src.get(), bytes);
    be.sync();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / kPerSample);
  }
  std::sort(ms.begin(), ms.end());
  CopyResult r;
  r.bytes = bytes;
  r.median_ms = ms[ms.size() / 2];
  r.gbs = 2.0 * static_cast<double>(bytes) / (r.median_ms / 1e3) / 1e9;
  return r;
}

std::vector<std::int64_t> check_rows(std::int64_t N) {
  std::vector<std::int64_t> rows = {0, N / 2, N - 1};
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

template <class T>
void write_raw(const std::string& path, const T* data, std::size_t count) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(T)));
  if (!f) throw std::runtime_error("cannot write " + path);
}

void write_json(const std::string& path, const nlohmann::json& doc) {
  std::ofstream f(path);
  f << doc.dump(2) << "\n";
  if (!f) throw std::runtime_error("cannot write " + path);
}

// A small generated input for torch_loss_cuda.py --gen-check: both sides must produce the
// same bits (logits, their bf16 rounding, labels).
void gen_check(const std::string& dir) {
  const std::int64_t N = 16, V = 50304;
  nlohmann::json meta = {{"N", N}, {"V", V}, {"buffers", nlohmann::json::array()}};
  std::vector<float> f(N * V);
  std::vector<std::uint16_t> b(N * V);
  for (std::uint32_t s = 0; s < 3; ++s) {
    fill_logits(f.data(), s, N, V);
    to_bf16(f.data(), b.data(), N * V);
    write_raw(dir + "/gen" + std::to_string(s) + ".f32", f.data(), f.size());
    write_raw(dir + "/gen" + std::to_string(s) + ".bf16", b.data(), b.size());
    meta["buffers"].push_back(s);
  }
  std::vector<std::int32_t> labels(N);
  for (std::int64_t r = 0; r < N; ++r) labels[r] = label_value(static_cast<std::uint32_t>(r), V);
  write_raw(dir + "/labels.i32", labels.data(), labels.size());
  write_json(dir + "/gen.json", meta);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

long long positive(const std::string& v, const std::string& name, long long least = 1) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || x < least)
    throw std::invalid_argument(name + " needs integers >= " + std::to_string(least) + ", got '" + v + "'");
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--n") o.N = positive(next(), a);
    else if (a == "--v") {
      o.Vs.clear();
      for (const auto& v : split(next())) o.Vs.push_back(positive(v, a));
    } else if (a == "--k") {
      o.Ks.clear();
      for (const auto& k : split(next())) o.Ks.push_back(static_cast<int>(positive(k, a)));
    } else if (a == "--dtypes") {
      o.dtypes = split(next());
      for (const auto& d : o.dtypes)
        if (d != "float32" && d != "bfloat16")
          throw std::invalid_argument("--dtypes: float32 and/or bfloat16, got '" + d + "'");
    } else if (a == "--warmup") o.warmup = static_cast<int>(positive(next(), a));
    else if (a == "--repeats") o.repeats = static_cast<int>(positive(next(), a));
    else if (a == "--copy-mib") o.copy_mib = static_cast<std::size_t>(positive(next(), a));
    else if (a == "--flush-mib") o.flush_mib = static_cast<std::size_t>(positive(next(), a));
    else if (a == "--device") o.device = static_cast<int>(positive(next(), a, 0));
    else if (a == "--json") o.json_path = next();
    else if (a == "--grad-rows") o.grad_dir = next();
    else if (a == "--gen-check") o.gen_check_dir = next();
    else if (a == "--host") o.host = true;
    else if (a == "--help" || a == "-h") {
      std::printf("usage: bench_loss_cuda [--n N] [--v V,..] [--k K,..] [--dtypes float32,bfloat16] "
                  "[--warmup W] [--repeats R]\n       [--copy-mib M] [--flush-mib M] [--device D] "
                  "[--json PATH] [--grad-rows DIR] [--host]\n       bench_loss_cuda --gen-check DIR\n");
      std::exit(0);
    } else throw std::invalid_argument("unknown argument " + a + " (--help lists them)");
  }
  if (o.Ks.empty() || o.Vs.empty() || o.dtypes.empty()) throw std::invalid_argument("empty --v, --k or --dtypes");
  for (auto V : o.Vs)
    if (static_cast<double>(o.N) * static_cast<double>(V) >= 4294967296.0)
      throw std::invalid_argument("N*V must stay below 2^32 (the generator's index is 32-bit)");
  return o;
}

// Refuses a device run where this build or machine has none (--host runs the CPU twin).
void require_device(const Options& o) {
  if (o.host) return;
  if (!cuda::built_with_cuda())
    throw std::runtime_error("this build has no CUDA backend (configure with CODISTILL_CUDA=ON); "
                             "--host runs the CPU twin");
  if (cuda::device_count() <= o.device)
    throw std::runtime_error("no CUDA device " + std::to_string(o.device) + " (" +
                             std::to_string(cuda::device_count()) + " visible); --host runs the CPU twin");
}

// What every measurement shares: the options, the backend, the loss's parameters, the copy
// ceiling, the L2 flush buffer, and the results gathered so far (written after each).
struct Session {
  const Options& o;
  const Backend& be;
  const cpu::DistillLossParams p{2.0, 1.0, 1.0};  // T, a, h
  CopyResult cp;
  Buffer flush;
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json grad_index = nlohmann::json::array();

  Session(const Options& opts, const Backend& backend, CopyResult copy)
      : o(opts), be(backend), cp(copy), flush(backend, opts.flush_mib << 20) {}

  void save() const {
    if (o.json_path.empty()) return;
    const nlohmann::json doc = {
        {"benchmark", "loss_cuda"}, {"impl", "codistill"}, {"backend", o.host ? "host" : "cuda"},
        {"N", o.N}, {"warmup", o.warmup}, {"repeats", o.repeats}, {"temperature", p.temperature},
        {"weight", p.weight}, {"hard_weight", p.hard_weight}, {"flush_mib", o.flush_mib},
        {"timing", "wall time of one call (launch, kernel, stream synchronization, result to host), "
                   "median over repeats after warm-up; student restored and L2 flushed before each call"},
        {"copy", {{"bytes", cp.bytes}, {"median_ms", cp.median_ms}, {"gbs", cp.gbs},
                  {"method", "kernels::cuda::memcpy_device_to_device, bytes read + written"}}},
        {"results", results}};
    write_json(o.json_path, doc);
  }
};

// The copy ceiling, on generated data, and the table's header.
CopyResult measure_and_print_copy(const Backend& be, const Options& o) {
  std::vector<float> pattern(std::size_t{1} << 22);
  fill_logits(pattern.data(), 7, 1, static_cast<std::int64_t>(pattern.size()));
  const CopyResult cp = measure_copy(be, o.copy_mib << 20, pattern);
  std::printf("device-to-device copy of %zu MiB: %.3f ms, %.1f GB/s (read + write)\n", o.copy_mib,
              cp.median_ms, cp.gbs);
  std::printf("distill_loss fwd+bwd, gradient in place, T=2 a=1 h=1, N=%lld, median of %d calls "
              "after %d warm-up (%s)\n",
              static_cast<long long>(o.N), o.repeats, o.warmup, o.host ? "host CPU twin" : "cuda");
  std::printf("%-8s %7s %2s %10s %10s %9s %7s %14s %6s\n", "dtype", "V", "K", "median ms", "min ms",
              "GB/s", "% copy", "loss", "det.");
  std::fflush(stdout);
  return cp;
}

// Buffer 0: the pristine student; 1..kmax: teachers (generated logits of one V and dtype).
std::vector<std::unique_ptr<Buffer>> upload_logits(const Backend& be, int kmax, std::int64_t N, std::int64_t V,
                                                   bool bf16) {
  const std::size_t n = static_cast<std::size_t>(N * V), bytes = n * (bf16 ? 2 : 4);
  std::vector<float> host(n);
  std::vector<std::uint16_t> host_bf16(n);
  std::vector<std::unique_ptr<Buffer>> bufs;
  for (int s = 0; s <= kmax; ++s) {
    bufs.push_back(std::make_unique<Buffer>(be, bytes));
    fill_logits(host.data(), static_cast<std::uint32_t>(s), N, V);
    if (bf16) {
      to_bf16(host.data(), host_bf16.data(), static_cast<std::int64_t>(n));
      be.upload(bufs.back()->get(), host_bf16.data(), bytes);
    } else {
      be.upload(bufs.back()->get(), host.data(), bytes);
    }
  }
  return bufs;
}

// --grad-rows: the first call's gradient rows of one case, and the index of all so far.
void save_grad_rows(Session& s, const Buffer& work, const std::string& dtype, std::int64_t V, int K,
                    const cpu::DistillLossResult& first) {
  const bool bf16 = dtype == "bfloat16";
  const std::size_t elem = bf16 ? 2 : 4;
  const auto rows = check_rows(s.o.N);
  std::vector<char> out(rows.size() * V * elem);
  for (std::size_t i = 0; i < rows.size(); ++i)
    s.be.download(out.data() + i * V * elem, work.as<char>() + rows[i] * V * elem, V * elem);
  char name[96];
  std::snprintf(name, sizeof name, "grad_%s_V%lld_K%d.%s", dtype.c_str(), static_cast<long long>(V), K,
                bf16 ? "bf16" : "f32");
  write_raw(s.o.grad_dir + "/" + name, out.data(), out.size());
  s.grad_index.push_back({{"dtype", dtype}, {"N", s.o.N}, {"V", V}, {"K", K}, {"rows", rows}, {"file", name},
                          {"temperature", s.p.temperature}, {"weight", s.p.weight},
                          {"hard_weight", s.p.hard_weight}, {"loss", first.loss}});
  write_json(s.o.grad_dir + "/grad_rows.json", s.grad_index);
}

// One row of the table: the loss over K teachers of the uploaded logits, timed.
void time_case(Session& s, const std::vector<std::unique_ptr<Buffer>>& bufs, Buffer& work, const Buffer& dlabels,
               const std::string& dtype, std::int64_t V, int K) {
  const Options& o = s.o;
  const std::int64_t N = o.N;
  const bool bf16 = dtype == "bfloat16";
  const std::size_t bytes = static_cast<std::size_t>(N * V) * (bf16 ? 2 : 4);
  std::vector<const float*> t32;
  std::vector<const std::uint16_t*> t16;
  for (int k = 1; k <= K; ++k) {
    t32.push_back(bufs[k]->as<const float>());
    t16.push_back(bufs[k]->as<const std::uint16_t>());
  }
  const std::int32_t* y = dlabels.as<const std::int32_t>();
  // The loss runs on a queue's stream with its scratch (made once, outside the timing).
  static std::unique_ptr<cuda::Stream> stream;
  if (!o.host && !stream) stream = std::make_unique<cuda::Stream>(o.device);
  auto call = [&]() -> cpu::DistillLossResult {
    if (bf16) {
      auto* z = work.as<std::uint16_t>();
      return o.host ? host_loss_bf16(z, t16.data(), K, y, z, N, V, s.p)
                    : cuda::distill_loss_bf16(z, t16.data(), K, y, z, N, V, s.p, stream->context());
    }
    auto* z = work.as<float>();
    return o.host ? cpu::distill_loss<float>(z, t32.data(), K, y, z, N, V, s.p)
                  : cuda::distill_loss(z, t32.data(), K, y, z, N, V, s.p, stream->context());
  };
  auto prepare = [&] {
    s.be.copy(work.get(), bufs[0]->get(), bytes);  // undo the last call's in-place gradient
    s.be.clear(s.flush.get(), s.flush.bytes());    // evict the inputs from L2
    s.be.sync();
  };

  // First call: the result to report and check, and the gradient rows.
  prepare();
  const cpu::DistillLossResult first = call();
  if (!o.grad_dir.empty()) save_grad_rows(s, work, dtype, V, K, first);
  for (int i = 0; i < o.warmup; ++i) {
    prepare();
    call();
  }
  std::vector<double> ms;
  bool deterministic = true;
  for (int i = 0; i < o.repeats; ++i) {
    prepare();
    const auto t0 = Clock::now();
    const cpu::DistillLossResult r = call();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    deterministic = deterministic && r.loss == first.loss && r.ce == first.ce && r.distill == first.distill;
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double traffic = static_cast<double>(bytes) * (K + 2);
  const double gbs = traffic / (med / 1e3) / 1e9;
  std::printf("%-8s %7lld %2d %10.4f %10.4f %9.1f %6.1f%% %14.8f %6s\n", dtype.c_str(),
              static_cast<long long>(V), K, med, ms.front(), gbs, 100 * gbs / s.cp.gbs, first.loss,
              deterministic ? "yes" : "NO");
  std::fflush(stdout);
  s.results.push_back({{"impl", "codistill"}, {"dtype", dtype}, {"N", N}, {"V", V}, {"K", K},
                       {"median_ms", med}, {"min_ms", ms.front()}, {"bytes", traffic}, {"gbs", gbs},
                       {"pct_copy", 100 * gbs / s.cp.gbs}, {"loss", first.loss}, {"ce", first.ce},
                       {"distill", first.distill}, {"rows", first.rows},
                       {"deterministic", deterministic}});
  s.save();
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  if (!o.gen_check_dir.empty()) {
    gen_check(o.gen_check_dir);
    std::printf("generated check inputs in %s\n", o.gen_check_dir.c_str());
    return 0;
  }
  Backend be{o.host, o.device};
  require_device(o);
  const int Kmax = *std::max_element(o.Ks.begin(), o.Ks.end());
  const std::int64_t N = o.N;
  Session s(o, be, measure_and_print_copy(be, o));
  for (const std::int64_t V : o.Vs) {
    std::vector<std::int32_t> labels(N);
    for (std::int64_t r = 0; r < N; ++r) labels[r] = label_value(static_cast<std::uint32_t>(r), V);
    Buffer dlabels(be, N * sizeof(std::int32_t));
    be.upload(dlabels.get(), labels.data(), N * sizeof(std::int32_t));
    for (const std::string& dtype : o.dtypes) {
      const bool bf16 = dtype == "bfloat16";
      const auto bufs = upload_logits(be, Kmax, N, V, bf16);
      Buffer work(be, static_cast<std::size_t>(N * V) * (bf16 ? 2 : 4));
      for (const int K : o.Ks) time_case(s, bufs, work, dlabels, dtype, V, K);
    }
  }
  s.save();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_loss_cuda: %s\n", e.what());
  return 2;
}
