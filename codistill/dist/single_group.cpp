#include "codistill/dist/single_group.hpp"

#include <cstdlib>

namespace codistill::dist {
namespace {

class SingleGroup final : public ProcessGroup {
 public:
  explicit SingleGroup(const GroupOptions& options) : ProcessGroup(options) {}

  std::string kind() const override { return "single"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }

  // Nothing to exchange; the length limit is still checked so that code tested in one
  // process does not fail only once it runs in a group.
  void start_all_reduce_sum(std::span<float> bucket) override { check_bucket(bucket.size()); }
  bool poll() override { return true; }
  void wait_all() override {}
  void all_reduce_sum_f64(std::span<double> data) override { check_bucket(data.size()); }
  void broadcast(std::span<std::byte>, int root) override { check_root(root, "broadcast"); }
  void barrier() override {}
  // No peers to stop: the process itself ends, without unwinding (as MPI_Abort would).
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_group(const GroupOptions& options) {
  return std::make_unique<SingleGroup>(options);
}

}  // namespace codistill::dist
