#pragma once
// What the executables' command lines share (DESIGN.md section 3): the exit codes, how an
// error is worded on stderr (the program's name first; the usage after a usage error), how
// --help is answered, and what a computing executable does first in main. Each main keeps
// only its own options and the errors that are its own; the process tests in tests/trainer/
// hold the messages and exit codes to the letter, so a change here is a change of contract.
#include <functional>
#include <optional>
#include <string>

#include <boost/program_options.hpp>

namespace codistill::cli {

inline constexpr int kExitOk = 0, kExitRuntime = 1, kExitUsage = 2;

// Before anything starts a thread: bounds OpenMP's spin where the machine is shared or this
// process is one of several ranks of a launch (dist::detect_launch; this may execute the
// program again: util/openmp_env.hpp says why) and installs the crash report
// (util/crash_report.hpp). `program` is a literal: the report keeps it.
void start(char** argv, const char* program);

// A command line's voice on stderr: "<name>: ..." on every line, and `usage` after a usage
// error. For a subcommand, name and usage are the subcommand's ("codistill-inspect list").
class Command {
 public:
  Command(std::string name, std::string usage) : name_(std::move(name)), usage_(std::move(usage)) {}

  const std::string& usage() const { return usage_; }

  // "<name>: <message>" and returns `code`.
  int fail(const std::string& message, int code) const;
  // "<name>: error: <what>" and returns kExitRuntime: a runtime failure.
  int error(const std::string& what) const { return fail("error: " + what, kExitRuntime); }
  // "<name>: <message>", then the usage, and returns kExitUsage.
  int usage_error(const std::string& message) const;

  // Runs `parse`, which returns false after printing help and throws
  // boost::program_options::error on bad usage: nullopt to go on, else the exit code to
  // return at once (kExitOk after help, usage_error's after bad usage).
  std::optional<int> parse(const std::function<bool()>& parse) const;

  // Stores argv's options in `vm`. --help (an option `help` in `options`): prints the usage,
  // a blank line and the options on stdout and returns false, before any required option is
  // missed; otherwise notifies `vm` (required options, bound variables) and returns true.
  bool store_or_help(int argc, char** argv, const boost::program_options::options_description& options,
                     boost::program_options::variables_map& vm) const;

 private:
  std::string name_, usage_;
};

}  // namespace codistill::cli
