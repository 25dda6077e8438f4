// codistill-inspect: the command line of DESIGN.md section 3 over codistill/inspect.
// Exit codes: 0 ok; 1 runtime failure, or an invalid checkpoint found by verify; 2 usage
// error (unknown subcommand or option, wrong number of arguments, bad --data spec).
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "codistill/inspect/inspect.hpp"
#include "trainer/cli.hpp"

namespace po = boost::program_options;
namespace inspect = codistill::inspect;
using codistill::cli::kExitOk, codistill::cli::kExitRuntime;

namespace {

struct Subcommand {
  const char* name;
  const char* args;  // positional arguments, as the usage line shows them
  int min_args, max_args;  // max_args -1: no limit
  const char* summary;
};

const Subcommand kSubcommands[] = {
    {"list", "RUN_DIR", 1, 1, "workers, their checkpoints (step, size, age, validity) and temp files"},
    {"show", "CKPT", 1, 1, "metadata and a tensor table (name, shape, dtype, mean, std, min, max)"},
    {"verify", "CKPT...", 1, -1, "full integrity check of each file; exit 1 if any is invalid"},
    {"diff", "A B", 2, 2, "per-parameter L2 distance, relative L2 and cosine similarity"},
    {"eval", "CKPT...", 1, -1, "loss and accuracy of each checkpoint and of their ensemble"},
    {"churn", "A B", 2, 2, "fraction of examples whose predicted class differs between A and B"},
};

std::string usage() {
  std::string s = "usage: codistill-inspect SUBCOMMAND ARGS... [--json]\n\nsubcommands:\n";
  for (const auto& c : kSubcommands) {
    std::string head = std::string(c.name) + " " + c.args;
    s += "  " + head + std::string(head.size() < 18 ? 18 - head.size() : 1, ' ') + c.summary + "\n";
  }
  return s +
         "\n--json prints one JSON document on stdout instead of tables.\n"
         "'codistill-inspect SUBCOMMAND --help' shows a subcommand's options.\n"
         "Exit codes: 0 ok, 1 runtime failure or invalid checkpoint, 2 usage error.\n";
}

std::string valid_names() {
  std::string s;
  for (const auto& c : kSubcommands) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

const Subcommand* find_subcommand(const std::string& name) {
  for (const auto& c : kSubcommands)
    if (name == c.name) return &c;
  return nullptr;
}

std::string sub_usage(const Subcommand& c) {
  return std::string("usage: codistill-inspect ") + c.name + " " + c.args + " [options]\n";
}

struct Parsed {
  std::vector<std::string> args;
  bool json = false, help = false;
  bool no_verify = false, all = false, config = false;
  inspect::EvalOptions eval;
};

po::options_description options_of(const Subcommand& c, Parsed& p) {
  po::options_description o(std::string(c.name) + " options");
  o.add_options()("help,h", "show this help")("json", "print one JSON document on stdout");
  const std::string name = c.name;
  if (name == "list")
    o.add_options()("no-verify", "read only the attributes (fast on a large run): validity is not checked");
  if (name == "show")
    o.add_options()("all", "also the optimizer slots and the /state entries")(
        "config", "also print the embedded config (always in --json)");
  if (name == "eval" || name == "churn")
    o.add_options()("data", po::value<std::string>(&p.eval.data)->value_name("SPEC")->default_value("test"),
                    "test | train | idx:IMAGES,LABELS. test and train are the splits of the data section "
                    "of the first checkpoint's embedded config (train: the whole split, not a shard); "
                    "inputs are normalized with each checkpoint's stored shift and scale")(
        "batch", po::value<std::int64_t>(&p.eval.batch)->value_name("N")->default_value(0),
        "examples per forward pass (0: the config's train.eval_batch_size)")(
        "limit", po::value<std::int64_t>(&p.eval.limit)->value_name("N")->default_value(0), "only the first N examples (0: all)")(
        "threads", po::value<int>(&p.eval.threads)->value_name("N")->default_value(0), "CPU threads (0: the config's run.threads)");
  if (name == "eval")
    o.add_options()("predictions", po::value<std::string>(&p.eval.predictions)->value_name("FILE"),
                    "write each example's softmax probabilities (the ensemble's for several checkpoints) to "
                    "FILE as CSV: index,label,predicted,p0,...");
  return o;
}

// Parses the words after the subcommand; for --help prints the subcommand's help. Throws
// po::error on bad usage.
Parsed parse(const Subcommand& c, const std::vector<std::string>& words) {
  Parsed p;
  po::options_description visible = options_of(c, p);
  po::options_description all;
  all.add(visible).add_options()("args", po::value<std::vector<std::string>>(&p.args), "");
  po::positional_options_description positional;
  positional.add("args", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(words).options(all).positional(positional).run(), vm);
  po::notify(vm);
  p.help = vm.count("help") > 0;
  p.json = vm.count("json") > 0;
  p.no_verify = vm.count("no-verify") > 0;
  p.all = vm.count("all") > 0;
  p.config = vm.count("config") > 0;
  if (p.help) {
    std::cout << sub_usage(c) << c.summary << "\n\n" << visible;
    return p;
  }
  const int n = static_cast<int>(p.args.size());
  if (n < c.min_args || (c.max_args >= 0 && n > c.max_args))
    throw po::error(std::string(c.name) + " takes " + c.args + ", got " + std::to_string(n) + " argument(s)");
  return p;
}

inspect::Report dispatch(const std::string& name, const Parsed& p) {
  const auto& a = p.args;
  if (name == "list") return inspect::list_run(a[0], {.verify = !p.no_verify});
  if (name == "show") return inspect::show(a[0], {.all = p.all, .config = p.config});
  if (name == "verify") return inspect::verify(a);
  if (name == "diff") return inspect::diff(a[0], a[1]);
  if (name == "eval") return inspect::eval(a, p.eval);
  return inspect::churn(a[0], a[1], p.eval);
}

}  // namespace

int main(int argc, char** argv) {
  codistill::cli::start(argv, "codistill-inspect");
  const codistill::cli::Command top("codistill-inspect", usage());
  const std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) return top.usage_error("missing subcommand");
  const std::string& name = words[0];
  if (name == "--help" || name == "-h" || name == "help") {
    std::cout << top.usage();
    return kExitOk;
  }
  const Subcommand* sub = find_subcommand(name);
  if (!sub) return top.usage_error("unknown subcommand '" + name + "' (valid: " + valid_names() + ")");
  const codistill::cli::Command cmd("codistill-inspect " + name, sub_usage(*sub));
  Parsed p;
  if (auto done = cmd.parse([&] {
        p = parse(*sub, std::vector<std::string>(words.begin() + 1, words.end()));
        return !p.help;
      }))
    return *done;
  try {
    inspect::Report r = dispatch(name, p);
    std::cout << (p.json ? r.doc.dump(2) + "\n" : r.text);
    return r.ok ? kExitOk : kExitRuntime;
  } catch (const inspect::UsageError& e) {
    return cmd.usage_error(e.what());
  } catch (const std::exception& e) {
    const int code = cmd.error(e.what());
    // A script reading --json output still gets one document, saying what went wrong.
    if (p.json) std::cout << inspect::Json{{"command", name}, {"error", e.what()}}.dump(2) << "\n";
    return code;
  }
}
