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

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/codistill-bench-checkpoint", out = "bench/results/checkpoint_cpu";
  std::int64_t params = 104857600;  // 400 MiB of float32: exactly dd's bs=4M count=100
  int repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--dir") dir = v;
    else if (a == "--params") params = std::stoll(v);
    else if (a == "--repeats") repeats = std::stoi(v);
    else if (a == "--out") out = v;
    else return std::cerr << "unknown option " << a << "\n", 2;
  }
  fs::create_directories(dir);
  // Two matrices of one model, like fc1 [out, in] and fc2, adding up to `params`.
  std::int64_t cols = 8192, rows1 = params / cols * 4 / 5, rows2 = params / cols - rows1;
  std::vector<float> w1(static_cast<std::size_t>(rows1 * cols)), w2(static_cast<std::size_t>(rows2 * cols));
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.f, 0.02f);
  for (auto& x : w1) x = normal(gen);
  for (auto& x : w2) x = normal(gen);
  ck::CheckpointView view;
  view.meta.model = "kind: mlp\n";
  view.meta.model_fingerprint = "bench";
  view.params = {ck::TensorRef::of<float>("fc1/weight", {rows1, cols}, w1.data()),
                 ck::TensorRef::of<float>("fc2/weight", {rows2, cols}, w2.data())};
  const double bytes = static_cast<double>(w1.size() + w2.size()) * 4;
  const long dd_count = static_cast<long>(bytes / (4 << 20));
  const std::string dd_file = dir + "/dd.bin", ck_file = dir + "/ckpt-000000001.h5";

  // Single-thread checksum speed over the same data (it bounds the write and read paths).
  double t0 = now_s();
  volatile std::uint64_t sink = ck::xxh64(w1.data(), w1.size() * 4);
  double xxh_gbs = w1.size() * 4 / (now_s() - t0) / 1e9;
  t0 = now_s();
  sink = sink + ck::xxh3_64(w1.data(), w1.size() * 4);  // the digest of files written now
  double xxh3_gbs = w1.size() * 4 / (now_s() - t0) / 1e9;
  t0 = now_s();
  sink = sink + ck::fletcher32(w1.data(), w1.size() * 4);
  double fletcher_gbs = w1.size() * 4 / (now_s() - t0) / 1e9;

  std::vector<double> dd_w, ck_w, dd_r, ck_r, ck_r2, dd_cold, ck_cold;
  // Cold reads (what a peer loading a teacher from shared storage sees) need the page cache
  // dropped, which needs root; without it only warm reads are measured.
  auto drop_caches = [] {
    ::sync();
    std::ofstream f("/proc/sys/vm/drop_caches");
    f << "3\n";
    f.flush();
    return static_cast<bool>(f);
  };
  const bool cold = drop_caches();
  std::uint64_t file_bytes = 0;
  // Before each timed step, sync(2) (untimed) so that no write-back or journal commit of
  // the previous step (or of deleting the last repeat's files) lands in its window; and
  // alternate which side writes first, so that neither always follows the other.
  auto dd_write = [&] {
    ::sync();
    dd_w.push_back(timed_system("dd if=/dev/zero of=" + dd_file + " bs=4M count=" + std::to_string(dd_count) +
                                " conv=fsync status=none"));
  };
  auto ck_write = [&] {
    ::sync();
    double t = now_s();
    file_bytes = ck::write(ck_file, view).bytes;
    ck_w.push_back(now_s() - t);
  };
  for (int r = 0; r < repeats; ++r) {
    fs::remove(dd_file);
    fs::remove(ck_file);
    if (r % 2 == 0) dd_write(), ck_write();
    else ck_write(), dd_write();
    ::sync();
    dd_r.push_back(timed_system("dd if=" + dd_file + " of=/dev/null bs=4M status=none"));
    t0 = now_s();
    auto data = ck::read(ck_file);
    ck_r.push_back(now_s() - t0);
    t0 = now_s();
    ck::read_into(ck_file, data);
    ck_r2.push_back(now_s() - t0);
    if (cold) {
      drop_caches();
      dd_cold.push_back(timed_system("dd if=" + dd_file + " of=/dev/null bs=4M status=none"));
      drop_caches();
      t0 = now_s();
      ck::read_into(ck_file, data);
      ck_cold.push_back(now_s() - t0);
    }
    if (data.params.size() != 2) throw std::runtime_error("read back the wrong checkpoint");
  }
  fs::remove(dd_file);
  fs::remove(ck_file);

  const double dd_bytes = static_cast<double>(dd_count) * (4 << 20);
  auto gbs = [](double b, double s) { return b / s / 1e9; };
  double dw = gbs(dd_bytes, median(dd_w)), cw = gbs(bytes, median(ck_w));
  double dr = gbs(dd_bytes, median(dd_r)), cr = gbs(bytes, median(ck_r)), cr2 = gbs(bytes, median(ck_r2));
  double drc = cold ? gbs(dd_bytes, median(dd_cold)) : 0, crc = cold ? gbs(bytes, median(ck_cold)) : 0;
  utsname u{};
  ::uname(&u);
  std::string cpu = shell_out("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'");
  std::string fstype = shell_out("stat -f -c %T " + dir);
  std::string commit = shell_out("git describe --always --dirty 2>/dev/null");
  char date[32];
  std::time_t tt = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&tt));

  std::ostringstream txt;
  txt << "checkpoint bandwidth vs dd, " << params << " float32 params (" << bytes / 1e6 << " MB data, "
      << file_bytes / 1e6 << " MB file), median of " << repeats << ", folder " << dir << " (" << fstype << ")\n";
  txt << "cpu: " << cpu << ", kernel " << u.release << ", commit " << commit << ", " << date << "\n\n";
  char line[200];
  std::snprintf(line, sizeof line, "%-34s %9s %9s %7s\n", "", "GB/s", "dd GB/s", "ratio");
  txt << line;
  std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %7.2f\n", "write (fsync'd, atomic publish)", cw, dw, cw / dw);
  txt << line;
  std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %7.2f\n", "read, new tensors (warm cache)", cr, dr, cr / dr);
  txt << line;
  std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %7.2f\n", "read_into reused tensors", cr2, dr, cr2 / dr);
  txt << line;
  if (cold) {
    std::snprintf(line, sizeof line, "%-34s %9.2f %9.2f %7.2f\n", "read_into, cold cache (dropped)", crc, drc,
                  crc / drc);
    txt << line;
  }
  std::snprintf(line, sizeof line, "\nsingle-thread checksums: xxh3-64 %.1f GB/s (the digest), xxh64 %.1f GB/s (before "
                "2026-11-24), fletcher32 %.1f GB/s\n", xxh3_gbs, xxh_gbs, fletcher_gbs);
  txt << line;
  txt << "per-repeat seconds (dd write, ckpt write, dd read, ckpt read, ckpt read_into):\n";
  for (int r = 0; r < repeats; ++r) {
    std::snprintf(line, sizeof line, "  %.3f %.3f %.3f %.3f %.3f\n", dd_w[r], ck_w[r], dd_r[r], ck_r[r], ck_r2[r]);
    txt << line;
  }
  std::cout << txt.str();

  auto list = [](const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  std::ofstream json(out + ".json");
  json << "{\n  \"benchmark\": \"checkpoint\",\n  \"device\": \"" << cpu << "\",\n  \"date\": \"" << date
       << "\",\n  \"commit\": \"" << commit << "\",\n  \"folder\": \"" << dir << "\",\n  \"fs\": \"" << fstype
       << "\",\n  \"params\": " << params << ",\n  \"data_bytes\": " << static_cast<std::uint64_t>(bytes)
       << ",\n  \"file_bytes\": " << file_bytes << ",\n  \"dd_bytes\": " << static_cast<std::uint64_t>(dd_bytes)
       << ",\n  \"repeats\": " << repeats << ",\n  \"write_gbs\": " << cw << ",\n  \"dd_write_gbs\": " << dw
       << ",\n  \"write_ratio\": " << cw / dw << ",\n  \"read_gbs\": " << cr << ",\n  \"dd_read_gbs\": " << dr
       << ",\n  \"read_ratio\": " << cr / dr << ",\n  \"read_into_gbs\": " << cr2
       << ",\n  \"read_into_ratio\": " << cr2 / dr << ",\n  \"cold_read_into_gbs\": " << crc
       << ",\n  \"dd_cold_read_gbs\": " << drc << ",\n  \"cold_read_ratio\": " << (cold ? crc / drc : 0)
       << ",\n  \"xxh3_64_gbs\": " << xxh3_gbs << ",\n  \"xxh64_gbs\": " << xxh_gbs
       << ",\n  \"fletcher32_gbs\": " << fletcher_gbs << ",\n  \"seconds\": {\"dd_write\": " << list(dd_w)
       << ", \"ckpt_write\": " << list(ck_w) << ", \"dd_read\": " << list(dd_r) << ", \"ckpt_read\": " << list(ck_r)
       << ", \"ckpt_read_into\": " << list(ck_r2) << ", \"dd_cold_read\": " << list(dd_cold)
       << ", \"ckpt_cold_read_into\": " << list(ck_cold) << "}\n}\n";
  std::ofstream(out + ".txt") << txt.str();
  return 0;
}
