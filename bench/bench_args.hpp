#pragma once
// `--key value` command lines of the in-process step benches (bench_step_phases,
// bench_layer_times, bench_teacher_step): the keys in order, each value on demand, integers
// checked whole and against a floor. Errors are std::invalid_argument naming the key.
#include <stdexcept>
#include <string>
#include <vector>

namespace codistill::bench {

class ArgReader {
 public:
  ArgReader(int argc, char** argv) : argc_(argc), argv_(argv) {}
  // Moves to the next key; false after the last.
  bool next() {
    if (++i_ >= argc_) return false;
    key_ = argv_[i_];
    return true;
  }
  const std::string& key() const { return key_; }
  // The current key's value (the next argument).
  std::string value() {
    if (i_ + 1 >= argc_) throw std::invalid_argument(key_ + " needs a value");
    return argv_[++i_];
  }
  // The value as a whole integer >= lowest.
  int count(int lowest) {
    const std::string v = value();
    std::size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size() || n < lowest)
      throw std::invalid_argument(key_ + " '" + v + "': need an integer >= " + std::to_string(lowest));
    return n;
  }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string key_;
};

// The options every in-process step bench takes: --config FILE (required), --set KEY=VALUE
// (repeatable), --threads, --block (steps per block), --blocks, --warmup (steps first).
// Each bench sets its own defaults.
struct StepArgs {
  std::string config;
  std::vector<std::string> overrides;
  int block = 10, blocks = 8, warmup = 5, threads = 2;
  int min_blocks = 1;  // the fewest --blocks the bench can summarize
  static constexpr const char* kValid = "--config --set --threads --block --blocks --warmup";

  // Reads the option at r's key; false when the key is not one of these.
  bool read(ArgReader& r) {
    const std::string& k = r.key();
    if (k == "--config") config = r.value();
    else if (k == "--set") overrides.push_back(r.value());
    else if (k == "--threads") threads = r.count(1);
    else if (k == "--block") block = r.count(1);
    else if (k == "--blocks") blocks = r.count(min_blocks);
    else if (k == "--warmup") warmup = r.count(0);
    else return false;
    return true;
  }
  // After the last option: the required ones are there.
  void check() const {
    if (config.empty()) throw std::invalid_argument("--config is required");
  }
};

}  // namespace codistill::bench
