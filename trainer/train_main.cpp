// codistill-train: the command line of DESIGN.md section 3 over the training engine.
// Exit codes: 0 finished (or stopped cleanly by SIGINT/SIGTERM), 2 usage or configuration
// error, 1 runtime failure. Started by mpirun (or srun) as R ranks with the same command line,
// the process is one rank of a worker group (config section `group`); a rank that fails ends
// the whole group with its exit code, after its own clean-up (rank 0's checkpoint writer).
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "checkpoint/fault_seam.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/dist/process_group.hpp"
#include "codistill/util/run_errors.hpp"
#include "codistill/train/group.hpp"
#include "codistill/train/progress.hpp"
#include "codistill/persist/run_dir.hpp"
#include "codistill/train/training.hpp"
#include "trainer/cli.hpp"

namespace po = boost::program_options;
using codistill::cli::kExitOk, codistill::cli::kExitUsage;

namespace {

const char* kUsage =
    "usage: codistill-train --config FILE [--set key.path=value]... [--worker I] [--workers N]\n"
    "                       [--run-dir DIR] [--device cpu|cuda|cuda:K] [--resume | --no-resume]\n";

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  bool resume = true;
};

// Parses argv; returns false after printing help. Throws po::error on bad usage.
bool parse_args(const codistill::cli::Command& cmd, int argc, char** argv, Args& args) {
  po::options_description opts("options");
  opts.add_options()
      ("help,h", "show this help")
      ("config,c", po::value<std::string>(&args.config)->required(), "YAML config file")
      ("set,s", po::value<std::vector<std::string>>()->composing(),
       "override a config key: --set optimizer.lr=0.1 (repeatable)")
      ("worker", po::value<std::string>(), "this worker's id (run.worker)")
      ("workers", po::value<std::string>(), "number of workers (run.workers)")
      ("run-dir", po::value<std::string>(), "run directory (run.dir)")
      ("device", po::value<std::string>(), "cpu | cuda | cuda:K (device)")
      ("resume", "continue from this worker's latest checkpoint if any (default)")
      ("no-resume", "refuse to start if this worker already has checkpoints");
  po::variables_map vm;
  if (!cmd.store_or_help(argc, argv, opts, vm)) return false;
  if (vm.count("resume") && vm.count("no-resume"))
    throw po::error("--resume and --no-resume exclude each other");
  args.resume = !vm.count("no-resume");
  if (vm.count("set")) args.overrides = vm["set"].as<std::vector<std::string>>();
  // Shorthands apply after the explicit --set overrides, as the later word wins.
  const std::pair<const char*, const char*> shorthands[] = {
      {"worker", "run.worker"}, {"workers", "run.workers"}, {"run-dir", "run.dir"}, {"device", "device"}};
  for (auto [flag, key] : shorthands)
    if (vm.count(flag)) args.overrides.push_back(std::string(key) + "=" + vm[flag].as<std::string>());
  return true;
}

// Fault injection for process-level tests: CODISTILL_FAULT_CHECKPOINT_STEPS="300,400"
// makes the checkpoint writes of those steps fail part-way, as a full disk would;
// CODISTILL_FAULT_KILL_CHECKPOINT_STEPS="300" SIGKILLs the trainer part-way through them.
std::vector<std::int64_t> fault_steps(const char* variable) {
  std::vector<std::int64_t> steps;
  const char* env = std::getenv(variable);
  if (!env) return steps;
  std::stringstream list(env);
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) steps.push_back(std::stoll(item));
  return steps;
}

}  // namespace

int main(int argc, char** argv) {
  codistill::cli::start(argv, "codistill-train");
  const codistill::cli::Command cmd("codistill-train", kUsage);
  // Before any thread starts (MPI's, OpenMP's): they inherit SIGINT and SIGTERM blocked
  // (train/training.cpp says why).
  try {
    codistill::install_stop_signal_handlers();
  } catch (const std::exception& e) {
    return cmd.error(e.what());
  }
  Args args;
  if (auto done = cmd.parse([&] { return parse_args(cmd, argc, argv, args); })) return *done;
  // Held here, outside the trainer, so that a failed rank can still end its group.
  std::shared_ptr<codistill::dist::ProcessGroup> group;
  auto end_group = [&](int code) {
    // The peers may be waiting for this rank in a collective: end them all now rather than
    // leave them to their deadline.
    if (group && group->size() > 1) {
      std::cerr.flush();
      group->abort(code);
    }
    return code;
  };
  try {
    codistill::Config cfg = codistill::load_config(args.config, args.overrides);
    group = codistill::dist::make_process_group(codistill::group_options(cfg.group));
    codistill::TrainOptions opts;
    opts.resume = args.resume;
    // Under mpirun a rank's stdout is a pseudo-terminal even when mpirun's goes to a file:
    // no in-place progress line for a group.
    opts.interactive = codistill::Progress::stdout_is_terminal() && group->size() == 1;
    // The process tests' faults enter through the library's one seam.
    codistill::fault_seam::Plan faults;
    faults.fail_checkpoint_steps = fault_steps("CODISTILL_FAULT_CHECKPOINT_STEPS");
    faults.kill_checkpoint_steps = fault_steps("CODISTILL_FAULT_KILL_CHECKPOINT_STEPS");
    codistill::fault_seam::install(std::move(faults));
    opts.group = group;
    codistill::install_stop_signal_handlers();  // again: in case the MPI library replaced the handler
    codistill::TrainSummary sum;
    {
      codistill::Trainer trainer(cfg, opts);
      sum = trainer.run();
    }
    if (group->rank() == 0)
      std::cout << "summary: steps " << sum.steps << ", wall " << codistill::format_duration(sum.wall_s)
                << ", test accuracy " << sum.test_accuracy * 100 << "%, test loss " << sum.test_loss
                << (sum.interrupted ? " (interrupted)" : "") << "\n";
    return kExitOk;
  } catch (const codistill::WorkerFinished& e) {
    if (!group || group->rank() == 0) std::cout << "codistill-train: " << e.what() << "\n";
    return kExitOk;  // every rank reads the same checkpoint step: all finish alike
  } catch (const codistill::ConfigError& e) {
    return end_group(cmd.fail(std::string("configuration error: ") + e.what(), kExitUsage));
  } catch (const codistill::RunDirError& e) {
    return end_group(cmd.fail(e.what(), kExitUsage));
  } catch (const std::exception& e) {
    return end_group(cmd.error(e.what()));
  }
}
