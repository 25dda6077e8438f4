#pragma once
// codistill-inspect (DESIGN.md section 3): offline tools over run directories and
// checkpoints. Each command returns a Report holding both the JSON document that `--json`
// prints and the human text (aligned tables) rendered from the same values, so that the
// two outputs never disagree. The command line itself lives in trainer/inspect_main.cpp.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace codistill::inspect {

// Bad input that is only found once the arguments are interpreted (an unknown --data
// spec, a batch size of 0): exit code 2, like the other usage errors.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The command cannot answer (an unreadable checkpoint, checkpoints of different models,
// data that does not fit the model): exit code 1. Checkpoint problems may also arrive as
// checkpoint::CheckpointError, other failures as std::runtime_error: all exit 1.
class InspectError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// JSON documents keep their keys in insertion order, so that "command" comes first and
// related fields stay together for a person reading --json output.
using Json = nlohmann::ordered_json;

struct Report {
  Json doc;  // "command" first
  std::string text;    // ends with a newline
  bool ok = true;      // false: the command ran but found a problem (verify: an invalid file)
};

// `list RUN_DIR`: every worker folder, its published checkpoints and teacher files (step,
// size, age, validity and why not; JSON: `checkpoints`, `teacher_files`) and temp files. verify = false only reads the attributes
// (fast on large runs); validity is then "unchecked".
struct ListOptions {
  bool verify = true;
};
Report list_run(const std::string& run_dir, const ListOptions& options = {});

// `show CKPT`: the root attributes, the model YAML and a table of tensor statistics
// (params; optimizer slots and state too with `all`). `config` adds the embedded config
// to the human text (the JSON always has it).
struct ShowOptions {
  bool all = false;
  bool config = false;
};
Report show(const std::string& path, const ShowOptions& options = {});

// `verify CKPT...`: checkpoint::verify of every file (every byte read and checked), plus
// the check RunStore makes when loading: a ckpt-<step>.h5 name agrees with the step
// attribute. Report.ok is false when any file is invalid.
Report verify(const std::vector<std::string>& paths);

// `diff A B`: per-parameter L2 distance |a - b|, relative L2 |a - b| / |a| and cosine
// similarity, and the same over all parameters. InspectError when the model
// fingerprints differ.
Report diff(const std::string& a, const std::string& b);

// Options of `eval` and `churn`.
//   data: "test" (the test split of the first checkpoint's embedded config), "train"
//         (its whole training split, not one worker's shard) or "idx:IMAGES,LABELS" (an
//         MNIST-format pair). Inputs are normalized with each checkpoint's stored
//         shift/scale, exactly as in training.
struct EvalOptions {
  std::string data = "test";
  std::int64_t batch = 0;  // 0: the config's train.eval_batch_size (1000 without a config)
  std::int64_t limit = 0;  // > 0: only the first `limit` examples
  int threads = 0;         // 0: the config's run.threads (1 without a config)
  // eval only, non-empty: write every example's softmax probabilities to this CSV file
  // (replacing it): `index,label,predicted,p0,...,p<V-1>`, one row per example in data
  // order; with several checkpoints the ensemble's (their mean). Each value is printed
  // with the fewest digits that read back as the same double.
  std::string predictions;
};

// `eval CKPT...`: loss and accuracy of each checkpoint and, for two or more, of their
// ensemble (the average of their softmax probabilities). All checkpoints must have the
// same model fingerprint (InspectError otherwise). With options.predictions the JSON has
// "predictions": that path.
Report eval(const std::vector<std::string>& paths, const EvalOptions& options = {});

// `churn A B`: the fraction of examples whose predicted class differs between A and B
// (the models may differ, as long as they take the same inputs and classes).
Report churn(const std::string& a, const std::string& b, const EvalOptions& options = {});

}  // namespace codistill::inspect
