#include "trainer/cli.hpp"

#include <iostream>

#include "codistill/dist/launch.hpp"
#include "codistill/util/crash_report.hpp"
#include "codistill/util/openmp_env.hpp"

namespace po = boost::program_options;

namespace codistill::cli {
namespace {

// The launch as dist/launch.hpp reads it, for util/openmp_env.hpp, which is below dist and
// cannot ask: more than one rank, or an unknown count, counts as several.
LaunchedRanks launched_ranks() {
  try {
    const dist::LaunchInfo launch = dist::detect_launch();
    return {launch.launched() && launch.size != 1, launch.evidence};
  } catch (const std::exception& e) {
    return {true, e.what()};  // malformed launcher variables: the trainer reports them later
  }
}

}  // namespace

void start(char** argv, const char* program) {
  reexec_with_bounded_openmp_spin(argv, program, launched_ranks());
  install_crash_report(program);
}

int Command::fail(const std::string& message, int code) const {
  std::cerr << name_ << ": " << message << "\n";
  return code;
}

int Command::usage_error(const std::string& message) const {
  std::cerr << name_ << ": " << message << "\n" << usage_;
  return kExitUsage;
}

std::optional<int> Command::parse(const std::function<bool()>& parse) const {
  try {
    if (!parse()) return kExitOk;
  } catch (const po::error& e) {
    return usage_error(e.what());
  }
  return std::nullopt;
}

bool Command::store_or_help(int argc, char** argv, const po::options_description& options,
                            po::variables_map& vm) const {
  po::store(po::command_line_parser(argc, argv).options(options).run(), vm);
  if (vm.count("help")) {
    std::cout << usage_ << "\n" << options << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

}  // namespace codistill::cli
