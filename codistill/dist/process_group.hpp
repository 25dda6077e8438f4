#pragma once
// The process-group seam: the ranks of one codistillation worker (a synchronous
// data-parallel group) and the collectives the step needs between them. Implementations:
// "single" (one process, every collective the identity), "mpi" (OpenMPI, on host memory)
// and "nccl" (CUDA: the float all-reduce of device memory through NCCL, everything else
// on host memory through an mpi group it holds). No CUDA, MPI or NCCL type appears here:
// each implementation keeps its library behind its own .cpp.
//
// Memory: every collective below takes host memory, in every kind, except
// start_device_all_reduce_sum, which takes memory of device() (kinds whose
// reduces_device_memory() is true: nccl).
//
// Every collective has a deadline (GroupOptions::timeout). A rank that is dead, hung or
// calling a different collective makes its peers throw CollectiveTimeout instead of
// waiting forever. A collective cannot be cancelled half-way, so after any error the
// group is unusable: every later call throws, and the process must exit non-zero (under
// mpirun a non-zero exit ends the whole job; abort() ends it at once).
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace codistill::dist {

// Misuse or failure of a group (bad root, a broken group, an MPI error code, ...).
class ProcessGroupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective that did not complete before its deadline.
class CollectiveTimeout : public ProcessGroupError {
 public:
  using ProcessGroupError::ProcessGroupError;
};

struct GroupOptions {
  // "auto" (mpi when started by mpirun/srun, else single), "single", "mpi", "nccl" (never
  // chosen by auto: the model must be on its device).
  std::string kind = "auto";
  // Deadline of each collective. Generous by default: ranks legitimately wait for the
  // slowest one (rank 0 writing a checkpoint or reading teachers while the others sit in a
  // broadcast), and a false timeout kills a healthy run.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // all_reduce_sum splits its span into buckets of at most this many bytes (rounded down
  // to whole floats): each bucket is one reduction in flight, so a caller can start a
  // bucket as soon as backward has finished its gradients. 25 MiB, as PyTorch's DDP.
  std::size_t bucket_bytes = 25u << 20;
};

// Throws std::invalid_argument naming the field when a value is out of range.
void validate(const GroupOptions& options);

// [begin, end) element ranges of the buckets of a span of `count` floats: equal buckets of
// floor(bucket_bytes / 4) elements (at least 1; at most INT_MAX, MPI's count type), the
// last one shorter when they do not divide `count`.
struct Bucket {
  std::size_t begin, end;
};
std::vector<Bucket> bucket_ranges(std::size_t count, std::size_t bucket_bytes);

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual std::string kind() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  const GroupOptions& options() const { return options_; }

  // Sums `data` element-wise over all ranks, in place, in buckets of
  // options().bucket_bytes (or of `bucket_bytes`): every bucket is started, then all are
  // waited for. Every rank must pass a span of the same length and the same bucket size.
  void all_reduce_sum(std::span<float> data) { all_reduce_sum(data, options_.bucket_bytes); }
  void all_reduce_sum(std::span<float> data, std::size_t bucket_bytes);

  // The pieces all_reduce_sum is made of, for a caller that overlaps reductions with
  // computation. start_all_reduce_sum begins summing `bucket` (at most INT_MAX floats) and
  // returns at once; the memory must stay alive and untouched until wait_all() returns.
  // poll() drives the reductions in flight once (MPI progresses only inside its calls) and
  // says whether all are done; wait_all() completes them or throws CollectiveTimeout (the
  // deadline counts from the call to wait_all). Every rank starts the same buckets in the
  // same order.
  virtual void start_all_reduce_sum(std::span<float> bucket) = 0;
  virtual bool poll() = 0;
  virtual void wait_all() = 0;

  // ---- device memory (reduces_device_memory(): nccl) ----
  // The device whose memory start_device_all_reduce_sum takes ("cuda:K", in
  // kernels::Device's spelling, which dist does not depend on); empty for a group that
  // reduces host memory only. Chosen when the group is made (nccl: the rank's local rank on
  // its node modulo the visible devices).
  virtual std::string device() const { return {}; }
  bool reduces_device_memory() const { return !device().empty(); }
  // Begins summing each of `buckets` (pointers into memory of device(), never read by the
  // host; at most INT_MAX floats each) over the ranks, in place, and returns at once. The
  // reductions run after everything queued so far on `stream` (the backend's native stream
  // of device(): kernels::Queue::native_stream(), opaque here), on a stream of the group's
  // own, so that the rest of backward queued on `stream` later overlaps them. The buckets of
  // one call go as one fused launch (an NCCL group call). poll() and wait_all() cover them
  // with the host ones; after wait_all() work queued on `stream` sees the sums (the stream
  // waits for them; the host has waited too, to keep the deadline). Every call until
  // wait_all passes the same stream. Refused (ProcessGroupError) by host-memory groups.
  virtual void start_device_all_reduce_sum(std::span<const std::span<float>> buckets, void* stream);

  // Sums a small float64 vector over all ranks, in place, at once (no buckets, at most
  // INT_MAX values): statistics that float32 would round (synchronized BatchNorm's sums).
  // May be called while start_all_reduce_sum's buckets are in flight (synchronized
  // BatchNorm's backward runs while the later layers' gradients are being reduced): every
  // rank issues the collectives in the same order, which is all MPI asks.
  virtual void all_reduce_sum_f64(std::span<double> data) = 0;

  // Copies root's `data` into every other rank's `data` (same length on every rank).
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  void broadcast(std::span<float> data, int root) { broadcast(std::as_writable_bytes(data), root); }

  // Returns once every rank has entered it.
  virtual void barrier() = 0;

  // Ends every rank of the group now with `exit_code` (MPI_Abort): for a rank that cannot
  // go on while its peers may be waiting for it in a collective (under srun a non-zero exit
  // alone does not stop the others; they would only time out).
  [[noreturn]] virtual void abort(int exit_code) = 0;

 protected:
  explicit ProcessGroup(GroupOptions options);
  // Throws ProcessGroupError unless 0 <= root < size().
  void check_root(int root, const char* what) const;
  // Throws ProcessGroupError when one bucket has more than INT_MAX floats.
  void check_bucket(std::size_t count) const;
  // "mpi rank 1 of 3": the prefix of every error message.
  std::string who() const;

 private:
  GroupOptions options_;
};

// Every kind the factory knows, built or not, in the order error messages list them.
const std::vector<std::string>& process_group_kinds();
// Empty when `kind` can be made in this build; otherwise why not (nccl: a build without
// CUDA, MPI or NCCL; a device that is missing at run time is the maker's error). Throws
// std::invalid_argument for a kind that is not in process_group_kinds().
std::string kind_unavailable_reason(const std::string& kind);

// Makes a group of options.kind ("auto" resolved by resolve_kind(detect_launch())).
// Throws std::invalid_argument for an unknown kind (listing the valid ones) or a bad
// option, ProcessGroupError for a kind not built or that fails to start (nccl: no CUDA
// device visible to this process, NCCL failing to connect the ranks before the deadline).
std::unique_ptr<ProcessGroup> make_process_group(const GroupOptions& options);

}  // namespace codistill::dist
