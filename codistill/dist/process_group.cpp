// What every group shares (options, buckets, error prefixes) and the kind-keyed factory.
#include "codistill/dist/process_group.hpp"

#include <climits>

#include "codistill/dist/launch.hpp"
#include "codistill/dist/single_group.hpp"
#ifdef CODISTILL_HAVE_MPI
#include "codistill/dist/mpi_group.hpp"
#endif
#ifdef CODISTILL_HAVE_NCCL
#include "codistill/dist/nccl_group.hpp"
#endif

namespace codistill::dist {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

void validate(const GroupOptions& options) {
  if (options.timeout.count() <= 0)
    throw std::invalid_argument("process group option timeout must be positive, got " +
                                std::to_string(options.timeout.count()) + " ms");
  if (options.bucket_bytes < sizeof(float))
    throw std::invalid_argument("process group option bucket_bytes must be at least " +
                                std::to_string(sizeof(float)) + " (one float), got " +
                                std::to_string(options.bucket_bytes));
}

std::vector<Bucket> bucket_ranges(std::size_t count, std::size_t bucket_bytes) {
  if (bucket_bytes < sizeof(float))
    throw std::invalid_argument("bucket_ranges: bucket_bytes " + std::to_string(bucket_bytes) +
                                " holds no float");
  std::size_t per = std::min<std::size_t>(bucket_bytes / sizeof(float), INT_MAX);
  std::vector<Bucket> out;
  out.reserve(count / per + 1);
  for (std::size_t b = 0; b < count; b += per) out.push_back({b, std::min(count, b + per)});
  return out;
}

ProcessGroup::ProcessGroup(GroupOptions options) : options_(std::move(options)) { validate(options_); }

void ProcessGroup::all_reduce_sum(std::span<float> data, std::size_t bucket_bytes) {
  for (const Bucket& b : bucket_ranges(data.size(), bucket_bytes))
    start_all_reduce_sum(data.subspan(b.begin, b.end - b.begin));
  wait_all();
}

void ProcessGroup::start_device_all_reduce_sum(std::span<const std::span<float>> /*buckets*/, void* /*stream*/) {
  throw ProcessGroupError(who() + ": start_device_all_reduce_sum on a group that reduces host memory only (kind " +
                          kind() + "; reduces_device_memory() is false: reduce through host memory)");
}

void ProcessGroup::check_root(int root, const char* what) const {
  if (root < 0 || root >= size())
    throw ProcessGroupError(who() + ": " + what + " from root " + std::to_string(root) +
                            ", which is not a rank of a group of " + std::to_string(size()));
}

void ProcessGroup::check_bucket(std::size_t count) const {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw ProcessGroupError(who() + ": one all-reduce bucket of " + std::to_string(count) +
                            " floats is more than INT_MAX (split it, as all_reduce_sum does)");
}

std::string ProcessGroup::who() const {
  return "process group (" + kind() + ", rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")";
}

const std::vector<std::string>& process_group_kinds() {
  static const std::vector<std::string> kinds = {"auto", "single", "mpi", "nccl"};
  return kinds;
}

std::string kind_unavailable_reason(const std::string& kind) {
  if (kind == "auto" || kind == "single") return "";
  if (kind == "mpi") {
#ifdef CODISTILL_HAVE_MPI
    return "";
#else
    return "this build has no MPI (configured with CODISTILL_MPI=OFF, or MPI was not found: "
           "install libopenmpi-dev and openmpi-bin, scripts/setup.sh does)";
#endif
  }
  if (kind == "nccl") {
#ifdef CODISTILL_HAVE_NCCL
    return "";
#else
    // Why CMake left it out (codistill/dist/CMakeLists.txt), e.g. "CUDA is off".
    return "this build has no NCCL process group: " CODISTILL_NCCL_MISSING;
#endif
  }
  throw std::invalid_argument("unknown process group kind '" + kind + "' (valid: " + join(process_group_kinds()) + ")");
}

std::unique_ptr<ProcessGroup> make_process_group(const GroupOptions& options) {
  validate(options);
  LaunchInfo launch = options.kind == "auto" ? detect_launch() : LaunchInfo{};
  std::string kind = resolve_kind(options.kind, launch);
  std::string why = kind_unavailable_reason(kind);  // throws for an unknown kind
  if (!why.empty()) {
    std::string chosen = options.kind == "auto" ? " (chosen by kind auto: " + launch.evidence + ")" : "";
    throw ProcessGroupError("process group kind '" + kind + "'" + chosen + ": " + why);
  }
  GroupOptions resolved = options;
  resolved.kind = kind;
  if (kind == "single") return make_single_group(resolved);
#ifdef CODISTILL_HAVE_MPI
  if (kind == "mpi") return make_mpi_group(resolved);
#endif
#ifdef CODISTILL_HAVE_NCCL
  if (kind == "nccl") return make_nccl_group(resolved);
#endif
  throw std::logic_error("make_process_group: kind '" + kind + "' is available but has no maker");
}

}  // namespace codistill::dist
