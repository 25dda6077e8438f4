#include "codistill/persist/run_dir.hpp"

#include <atomic>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <boost/filesystem.hpp>
#include <fmt/format.h>

#include "checkpoint/naming.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/persist/init_from.hpp"

namespace fs = boost::filesystem;

namespace codistill {

RunPaths run_paths(const Config& cfg) {
  RunPaths p;
  p.run_dir = cfg.run.dir;
  p.config = (fs::path(cfg.run.dir) / "config.yaml").string();
  p.worker_dir = (fs::path(cfg.run.dir) / checkpoint::worker_dir_name(cfg.run.worker)).string();
  p.metrics = (fs::path(p.worker_dir) / "metrics.jsonl").string();
  p.log = (fs::path(p.worker_dir) / "train.log").string();
  return p;
}

namespace {

// The run-level config with the per-worker keys neutralized (its id, when it retires, and
// which GPU it was given): what config.yaml records.
std::string run_level_yaml(Config cfg) {
  cfg.run.worker = 0;
  cfg.run.retire_at = 0;
  if (cfg.device.starts_with("cuda")) cfg.device = "cuda";
  return to_yaml(cfg);
}

// What two workers' views of one run must agree on: the run-level config without the
// directory's spelling. The config.yaml compared with is the one inside the directory
// itself, so the identity is settled already, however the directory was reached (a
// symlink, another mount point, a relative path from another working directory).
std::string comparable(Config cfg) {
  cfg.run.dir.clear();
  // The cohort is elastic (docs/training.md, "An elastic cohort"): a worker started later
  // with a larger run.workers joins the same run. config.yaml keeps the first one's count.
  cfg.run.workers = 1;
  // Never changes a run's results (batches are bit-identical with and without), and builds
  // before it was auto recorded `prefetch: true`: a resume may set it either way.
  cfg.data.prefetch = "auto";
  return run_level_yaml(std::move(cfg));
}

void write_file_exclusive(const std::string& path, const std::string& text) {
  // Write a private temp file, then link() it into place: link fails if the target exists,
  // so two workers starting together never clobber each other's file.
  // pid and a per-process counter: two workers in one process (tests, worker groups) must
  // not share a temp file, or one unlinks the other's before its link().
  static std::atomic<unsigned> counter{0};
  std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw RunDirError("cannot write " + tmp + ": " + std::strerror(errno));
  }
  int rc = ::link(tmp.c_str(), path.c_str());
  int err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0 && err != EEXIST)
    throw RunDirError("cannot create " + path + ": " + std::strerror(err));
}

void check_same_run(const Config& cfg, const RunPaths& p) {
  Config theirs;
  try {
    theirs = load_config(p.config);
  } catch (const std::exception& e) {
    throw RunDirError("run directory " + p.run_dir + " holds an unreadable config.yaml: " + e.what());
  }
  // A worker that joins the running run (model.init_from peers) starts from its peers'
  // weights instead of where the run's first workers started: the same run all the same.
  Config mine = cfg;
  if (mine.model.init_from == kInitFromPeers) mine.model.init_from = theirs.model.init_from;
  if (comparable(theirs) != comparable(mine))
    throw RunDirError("run directory " + p.run_dir +
                      " already holds a different run (its config.yaml differs from this "
                      "config); choose another --run-dir");
}

}  // namespace

void check_same_run(const Config& cfg) {
  const RunPaths p = run_paths(cfg);
  if (fs::exists(p.config)) check_same_run(cfg, p);
}

RunPaths prepare_run_dir(const Config& cfg, bool resume) {
  RunPaths p = run_paths(cfg);
  boost::system::error_code ec;
  fs::create_directories(p.worker_dir, ec);
  if (ec) throw RunDirError("cannot create run directory " + p.worker_dir + ": " + ec.message());

  write_file_exclusive(p.config, run_level_yaml(cfg));
  check_same_run(cfg, p);

  if (!resume && fs::exists(p.metrics))
    throw RunDirError("worker directory " + p.worker_dir +
                      " already holds a run (metrics.jsonl exists) and --no-resume never "
                      "overwrites: choose another --run-dir or --worker");
  return p;
}

}  // namespace codistill
