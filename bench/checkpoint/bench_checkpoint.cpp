// Checkpoint bandwidth beside dd, measured side by side in one run (DESIGN.md section 10).
//
//   bench_checkpoint [--dir DIR] [--params N] [--repeats R] [--out PREFIX]
//
// Per repeat, into the same folder (the two writes alternate in order):
//   dd write:  dd if=/dev/zero of=DIR/dd.bin bs=4M count=<size/4M> conv=fsync
//   ckpt write: checkpoint::write of N float32 parameters (fsync of file and folder)
//   dd read:   dd if=DIR/dd.bin of=/dev/null bs=4M            (right after its write)
//   ckpt read: checkpoint::read with every check (fletcher32, digest, finite), into new
//              tensors (their first-touch page faults included), then read_into the
//              same tensors again (a teacher reloaded in place)
// Reads come right after the writes, from the page cache as much as the kernel kept:
// dropping caches needs root on the host, which a benchmark should not assume. Both
// sides get the same treatment, so the ratio is fair; the absolute read numbers are
// memory-bound, not disk-bound. Medians over the repeats are reported.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/hash.hpp"

namespace ck = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string shell_out(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

double timed_system(const std::string& cmd) {
  double t0 = now_s();
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  return now_s() - t0;
}

struct Options {
  std::string dir = "/tmp/codistill-bench-checkpoint", out = "bench/results/checkpoint_cpu";
  std::int64_t params = 104857600;  // 400 MiB of float32: exactly dd's bs=4M count=100
  int repeats = 7;
};

// False (after naming it) on an unknown option.
bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--dir") o.dir = v;
    else if (a == "--params") o.params = std::stoll(v);
    else if (a == "--repeats") o.repeats = std::stoi(v);
    else if (a == "--out") o.out = v;
    else return std::cerr << "unknown option " << a << "\n", false;
  }
  return true;
}

// Two matrices of one model, like fc1 [out, in] and fc2, adding up to `params`. The view
// points into w1 and w2, so the struct is filled in place and never copied.
struct Model {
  std::vector<float> w1, w2;
  ck::CheckpointView view;
  double bytes = 0;

  explicit Model(std::int64_t params) {
    std::int64_t cols = 8192, rows1 = params / cols * 4 / 5, rows2 = params / cols - rows1;
    w1.resize(static_cast<std::size_t>(rows1 * cols));
    w2.resize(static_cast<std::size_t>(rows2 * cols));
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.f, 0.02f);
    for (auto& x : w1) x = normal(gen);
    for (auto& x : w2) x = normal(gen);
    view.meta.model = "kind: mlp\n";
    view.meta.model_fingerprint = "bench";
    view.params = {ck::TensorRef::of<float>("fc1/weight", {rows1, cols}, w1.data()),
                   ck::TensorRef::of<float>("fc2/weight", {rows2, cols}, w2.data())};
    bytes = static_cast<double>(w1.size() + w2.size()) * 4;
  }
};

struct ChecksumSpeeds {
  double xxh64 = 0, xxh3 = 0, fletcher = 0;  // GB/s
};

// Single-thread checksum speed over the same data (it bounds the write and read paths).
ChecksumSpeeds measure_checksums(const std::vector<float>& w) {
  ChecksumSpeeds s;
  const std::size_t n = w.size() * 4;
  double t0 = now_s();
  volatile std::uint64_t sink = ck::xxh64(w.data(), n);
  s.xxh64 = n / (now_s() - t0) / 1e9;
  t0 = now_s();
  sink = sink + ck::xxh3_64(w.data(), n);  // the digest of files written now
  s.xxh3 = n / (now_s() - t0) / 1e9;
  t0 = now_s();
  sink = sink + ck::fletcher32(w.data(), n);
  s.fletcher = n / (now_s() - t0) / 1e9;
  return s;
}

// Cold reads (what a peer loading a teacher from shared storage sees) need the page cache
// dropped, which needs root; without it only warm reads are measured.
bool drop_caches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.flush();
  return static_cast<bool>(f);
}

// Seconds per repeat of each timed step.
struct Timings {
  std::vector<double> dd_w, ck_w, dd_r, ck_r, ck_r2, dd_cold, ck_cold;
  std::uint64_t file_bytes = 0;
  bool cold = false;
};

Timings time_repeats(const Options& o, const Model& model, long dd_count) {
  Timings t;
  const std::string dd_file = o.dir + "/dd.bin", ck_file = o.dir + "/ckpt-000000001.h5";
  t.cold = drop_caches();
  // Before each timed step, sync(2) (untimed) so that no write-back or journal commit of
  // the previous step (or of deleting the last repeat's files) lands in its window; and
  // alternate which side writes first, so that neither always follows the other.
  auto dd_write = [&] {
    ::sync();
    t.dd_w.push_back(timed_system("dd if=/dev/zero of=" + dd_file + " bs=4M count=" + std::to_string(dd_count) +
                                  " conv=fsync status=none"));
  };
  auto ck_write = [&] {
    ::sync();
    double t0 = now_s();
    t.file_bytes = ck::write(ck_file, model.view).bytes;
    t.ck_w.push_back(now_s() - t0);
  };
  for (int r = 0; r < o.repeats; ++r) {
    fs::remove(dd_file);
    fs::remove(ck_file);
    if (r % 2 == 0) dd_write(), ck_write();
    else ck_write(), dd_write();
    ::sync();
    t.dd_r.push_back(timed_system("dd if=" + dd_file + " of=/dev/null bs=4M status=none"));
    double t0 = now_s();
    auto data = ck::read(ck_file);
    t.ck_r.push_back(now_s() - t0);
    t0 = now_s();
    ck::read_into(ck_file, data);
    t.ck_r2.push_back(now_s() - t0);
    if (t.cold) {
      drop_caches();
      t.dd_cold.push_back(timed_system("dd if=" + dd_file + " of=/dev/null bs=4M status=none"));
      drop_caches();
      t0 = now_s();
      ck::read_into(ck_file, data);
      t.ck_cold.push_back(now_s() - t0);
    }
    if (data.params.size() != 2) throw std::runtime_error("read back the wrong checkpoint");
  }
  fs::remove(dd_file);
  fs::remove(ck_file);
  return t;
}

// Median bandwidths in GB/s; the cold ones are 0 without root.
struct Bandwidths {
  double dw, cw, dr, cr, cr2, drc, crc;
};

Bandwidths bandwidths(const Timings& t, double bytes, double dd_bytes) {
  auto gbs = [](double b, double s) { return b / s / 1e9; };
  return {gbs(dd_bytes, median(t.dd_w)),
          gbs(bytes, median(t.ck_w)),
          gbs(dd_bytes, median(t.dd_r)),
          gbs(bytes, median(t.ck_r)),
          gbs(bytes, median(t.ck_r2)),
          t.cold ? gbs(dd_bytes, median(t.dd_cold)) : 0,
          t.cold ? gbs(bytes, median(t.ck_cold)) : 0};
}

// Where and when it ran, for both reports.
struct Machine {
  std::string cpu, fstype, commit, kernel;
  char date[32];
};

Machine describe_machine(const std::string& dir) {
  Machine m;
  utsname u{};
  ::uname(&u);
  m.kernel = u.release;
  m.cpu = shell_out("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'");
  m.fstype = shell_out("stat -f -c %T " + dir);
  m.commit = shell_out("git describe --always --dirty 2>/dev/null");
  std::time_t tt = std::time(nullptr);
  std::strftime(m.date, sizeof m.date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&tt));
  return m;
}

std::string text_report(const Options& o, const Machine& m, const Timings& t, const Bandwidths& b,
                        const ChecksumSpeeds& sums, double bytes) {
  std::ostringstream txt;
  txt << "checkpoint bandwidth vs dd, " << o.params << " float32 params (" << bytes / 1e6 << " MB data, "
      << t.file_bytes / 1e6 << " MB file), median of " << o.repeats << ", folder " << o.dir << " (" << m.fstype
      << ")\n";
  txt << "cpu: " << m.cpu << ", kernel " << m.kernel << ", commit " << m.commit << ", " << m.date << "\n\n";
  char line[200];
  std::snprintf(line, sizeof line, "%-34s %9s %9s %7s\n", "", "GB/s", "dd GB/s", "ratio");
  txt << line;
  std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %7.2f\n", "write (fsync'd, atomic publish)", b.cw, b.dw,
                b.cw / b.dw);
  txt << line;
  std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %7.2f\n", "read, new tensors (warm cache)", b.cr, b.dr,
                b.cr / b.dr);
  txt << line;
  std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %7.2f\n", "read_into reused tensors", b.cr2, b.dr,
                b.cr2 / b.dr);
  txt << line;
  if (t.cold) {
    std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %7.2f\n", "read_into, cold cache (dropped)", b.crc, b.drc,
                  b.crc / b.drc);
    txt << line;
  }
  std::snprintf(line, sizeof line, "\nsingle-thread checksums: xxh3-64 %.1f GB/s (the digest), xxh64 %.1f GB/s (before "
                "2026-11-24), fletcher32 %.1f GB/s\n", sums.xxh3, sums.xxh64, sums.fletcher);
  txt << line;
  txt << "per-repeat seconds (dd write, ckpt write, dd read, ckpt read, ckpt read_into):\n";
  for (int r = 0; r < o.repeats; ++r) {
    std::snprintf(line, sizeof line, "  %.3f %.3f %.3f %.3f %.3f\n", t.dd_w[r], t.ck_w[r], t.dd_r[r], t.ck_r[r],
                  t.ck_r2[r]);
    txt << line;
  }
  return txt.str();
}

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void write_json(const std::string& path, const Options& o, const Machine& m, const Timings& t, const Bandwidths& b,
                const ChecksumSpeeds& sums, double bytes, double dd_bytes) {
  std::ofstream json(path);
  json << "{\n  \"benchmark\": \"checkpoint\",\n  \"device\": \"" << m.cpu << "\",\n  \"date\": \"" << m.date
       << "\",\n  \"commit\": \"" << m.commit << "\",\n  \"folder\": \"" << o.dir << "\",\n  \"fs\": \"" << m.fstype
       << "\",\n  \"params\": " << o.params << ",\n  \"data_bytes\": " << static_cast<std::uint64_t>(bytes)
       << ",\n  \"file_bytes\": " << t.file_bytes << ",\n  \"dd_bytes\": " << static_cast<std::uint64_t>(dd_bytes)
       << ",\n  \"repeats\": " << o.repeats << ",\n  \"write_gbs\": " << b.cw << ",\n  \"dd_write_gbs\": " << b.dw
       << ",\n  \"write_ratio\": " << b.cw / b.dw << ",\n  \"read_gbs\": " << b.cr << ",\n  \"dd_read_gbs\": " << b.dr
       << ",\n  \"read_ratio\": " << b.cr / b.dr << ",\n  \"read_into_gbs\": " << b.cr2
       << ",\n  \"read_into_ratio\": " << b.cr2 / b.dr << ",\n  \"cold_read_into_gbs\": " << b.crc
       << ",\n  \"dd_cold_read_gbs\": " << b.drc << ",\n  \"cold_read_ratio\": " << (t.cold ? b.crc / b.drc : 0)
       << ",\n  \"xxh3_64_gbs\": " << sums.xxh3 << ",\n  \"xxh64_gbs\": " << sums.xxh64
       << ",\n  \"fletcher32_gbs\": " << sums.fletcher << ",\n  \"seconds\": {\"dd_write\": " << json_list(t.dd_w)
       << ", \"ckpt_write\": " << json_list(t.ck_w) << ", \"dd_read\": " << json_list(t.dd_r)
       << ", \"ckpt_read\": " << json_list(t.ck_r) << ", \"ckpt_read_into\": " << json_list(t.ck_r2)
       << ", \"dd_cold_read\": " << json_list(t.dd_cold) << ", \"ckpt_cold_read_into\": " << json_list(t.ck_cold)
       << "}\n}\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, o)) return 2;
  fs::create_directories(o.dir);
  const Model model(o.params);
  const long dd_count = static_cast<long>(model.bytes / (4 << 20));
  const double dd_bytes = static_cast<double>(dd_count) * (4 << 20);
  const ChecksumSpeeds sums = measure_checksums(model.w1);
  const Timings t = time_repeats(o, model, dd_count);
  const Bandwidths b = bandwidths(t, model.bytes, dd_bytes);
  const Machine m = describe_machine(o.dir);
  const std::string txt = text_report(o, m, t, b, sums, model.bytes);
  std::cout << txt;
  write_json(o.out + ".json", o, m, t, b, sums, model.bytes, dd_bytes);
  std::ofstream(o.out + ".txt") << txt;
  return 0;
}
