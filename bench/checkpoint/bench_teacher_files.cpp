// What a teacher reload reads and takes: a peer's checkpoint against its teacher files
// (docs/checkpoint-format.md, "Teacher files"), side by side in one run (DESIGN.md
// section 10).
//
//   bench_teacher_files --ckpt CKPT --dir DIR [--repeats R]
//
// Writes DIR/teacher-f32.h5 and DIR/teacher-bf16.h5 from the checkpoint CKPT, then per
// repeat, the three files in turn (alternating), reloads each the way TeacherPool does:
// checkpoint::read with teacher_read_options() (every check, digest included) and the
// model rebuilt from it (model_from_checkpoint); the upload to a device is left out.
// Each reload is timed warm (right after the previous one: page cache) and cold (the
// file's pages dropped first with posix_fadvise(DONTNEED), which needs no root and works
// on clean pages: the files are fsynced). Bytes read: the library's count of dataset
// storage read (CheckpointData::bytes_read) and the process's rchar (/proc/self/io:
// bytes of read system calls, metadata included). Prints best and median per file kind (ms),
// and the checkpoint's bytes_read and median times over each kind's (x_*).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_args.hpp"
#include "checkpoint/checkpoint.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/teachers/teachers.hpp"

namespace ck = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

std::uint64_t rchar() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t v = 0;
  while (io >> key >> v)
    if (key == "rchar:") return v;
  return 0;
}

void drop_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Sample {
  double ms = 0, read_ms = 0;  // the whole reload; the read alone
  std::uint64_t bytes = 0, rchar = 0;
};

Sample reload(const std::string& path, bool cold) {
  if (cold) drop_pages(path);
  const std::uint64_t r0 = rchar();
  const auto t0 = std::chrono::steady_clock::now();
  ck::CheckpointData data = ck::read(path, codistill::teacher_read_options());
  const auto t1 = std::chrono::steady_clock::now();
  codistill::Model model = codistill::model_from_checkpoint(data);
  Sample s;
  s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  s.read_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  s.rchar = rchar() - r0;
  s.bytes = data.bytes_read;
  return s;
}

double best(std::vector<double> v) { return *std::min_element(v.begin(), v.end()); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string ckpt, dir;
  int repeats = 5;
  try {
    codistill::bench::ArgReader args(argc, argv);
    while (args.next()) {
      if (args.key() == "--ckpt") ckpt = args.value();
      else if (args.key() == "--dir") dir = args.value();
      else if (args.key() == "--repeats") repeats = args.count(1);
      else throw std::invalid_argument("unknown argument " + args.key());
    }
    if (ckpt.empty() || dir.empty()) throw std::invalid_argument("--ckpt and --dir are required");
  } catch (const std::exception& e) {
    std::cerr << "bench_teacher_files: " << e.what() << "\n";
    return 2;
  }
  // The teacher files of the checkpoint, written as the trainer writes them.
  const ck::CheckpointData full = ck::read(ckpt);
  std::vector<std::pair<std::string, std::string>> files = {{"checkpoint", ckpt}};
  for (auto [kind, type] : {std::pair{"teacher-f32", ck::ElemType::f32}, std::pair{"teacher-bf16", ck::ElemType::bf16}}) {
    const std::string path = (fs::path(dir) / (std::string(kind) + ".h5")).string();
    ck::write_teacher(path, full.view(), type);
    files.emplace_back(kind, path);
  }
  std::map<std::string, std::vector<double>> warm_ms, cold_ms, warm_read, cold_read;
  std::map<std::string, Sample> last;
  for (int r = 0; r < repeats; ++r) {
    for (const auto& [kind, path] : files) {
      const Sample cold = reload(path, true);
      cold_ms[kind].push_back(cold.ms);
      cold_read[kind].push_back(cold.read_ms);
      last[kind] = reload(path, false);
      warm_ms[kind].push_back(last[kind].ms);
      warm_read[kind].push_back(last[kind].read_ms);
    }
  }
  std::printf("# %s: %zu params tensors, %zu buffers, %zu optimizer slots; %d repeats, kinds alternating\n",
              ckpt.c_str(), full.params.size(), full.buffers.size(), full.optimizer.size(), repeats);
  std::printf("%-13s %12s %12s %12s %9s %9s %9s %9s %8s %7s %7s\n", "file", "file_bytes", "bytes_read", "rchar",
              "warm_best", "warm_med", "cold_best", "cold_med", "x_bytes", "x_warm", "x_cold");
  const double ref_bytes = static_cast<double>(last["checkpoint"].bytes), ref_cold = median(cold_ms["checkpoint"]),
               ref_warm = median(warm_ms["checkpoint"]);
  for (const auto& [kind, path] : files) {
    const Sample& s = last[kind];
    std::printf("%-13s %12ju %12ju %12ju %9.2f %9.2f %9.2f %9.2f %8.2f %7.2f %7.2f\n", kind.c_str(),
                static_cast<std::uintmax_t>(fs::file_size(path)), static_cast<std::uintmax_t>(s.bytes),
                static_cast<std::uintmax_t>(s.rchar), best(warm_ms[kind]), median(warm_ms[kind]), best(cold_ms[kind]),
                median(cold_ms[kind]), ref_bytes / static_cast<double>(s.bytes), ref_warm / median(warm_ms[kind]),
                ref_cold / median(cold_ms[kind]));
  }
  // The read alone (checkpoint::read with every check), without the model's rebuild.
  std::printf("%-13s %9s %9s %9s %9s %7s %7s   (read only, ms)\n", "file", "warm_best", "warm_med", "cold_best",
              "cold_med", "x_warm", "x_cold");
  for (const auto& [kind, path] : files)
    std::printf("%-13s %9.2f %9.2f %9.2f %9.2f %7.2f %7.2f\n", kind.c_str(), best(warm_read[kind]),
                median(warm_read[kind]), best(cold_read[kind]), median(cold_read[kind]),
                median(warm_read["checkpoint"]) / median(warm_read[kind]),
                median(cold_read["checkpoint"]) / median(cold_read[kind]));
  return 0;
}
