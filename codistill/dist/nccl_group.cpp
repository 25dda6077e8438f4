// Kind "nccl" on the CUDA runtime and NCCL (nccl_group.hpp). How it keeps the seam's
// promises:
// - Deadlines: the communicator is non-blocking (ncclConfig_t::blocking = 0), so no NCCL
//   call waits for a peer; the group polls ncclCommGetAsyncError (creation, enqueueing) and
//   a CUDA event behind the reductions (completion) against GroupOptions::timeout, and on
//   timeout or any error aborts the communicator (ncclCommAbort ends its kernels, so no
//   stream stays stuck on a dead peer) and throws. The group is then unusable, as the mpi
//   group is after an error.
// - Ordering: reductions run on a stream of the group's own that first waits for an event
//   recorded on the caller's stream (everything backward queued so far); wait_all() makes
//   the caller's stream wait for an event behind them, so the optimizer queued after it
//   reads the sums. The caller's stream never waits on NCCL before wait_all(): a hung peer
//   cannot wedge the compute stream.
#include "codistill/dist/nccl_group.hpp"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "codistill/dist/call_guard.hpp"
#include "codistill/dist/launch.hpp"
#include "codistill/dist/mpi_group.hpp"
#include "codistill/dist/nccl_api.hpp"

namespace codistill::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string cuda_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

// Visible CUDA devices, checked before MPI is touched so that a machine without a GPU gets
// this error at once, in one process as under mpirun.
int visible_devices() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    throw ProcessGroupError(
        "nccl process group: no CUDA device is visible to this process" +
        (e != cudaSuccess ? " (cudaGetDeviceCount: " + cuda_text(e) + ")" : std::string()) +
        ": the nccl kind all-reduces GPU memory; on the CPU use group.kind mpi (or auto)");
  }
  return n;
}

// The launcher's local rank, else this rank's position among the ranks on its host: each
// rank in turn broadcasts its host name (what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)
// would give, through the seam's host collectives, so that no MPI type is needed here).
int local_rank(ProcessGroup& host) {
  const int from_launcher = launch_local_rank();
  if (from_launcher >= 0) return from_launcher;
  std::array<char, 256> mine{};
  if (::gethostname(mine.data(), mine.size() - 1) != 0) std::strncpy(mine.data(), "?", mine.size());
  int local = 0;
  for (int root = 0; root < host.size(); ++root) {
    std::array<char, 256> theirs = mine;
    host.broadcast(std::as_writable_bytes(std::span(theirs)), root);
    if (root < host.rank() && theirs == mine) ++local;
  }
  return local;
}

class NcclGroup final : public ProcessGroup {
 public:
  explicit NcclGroup(const GroupOptions& options);
  ~NcclGroup() override;

  std::string kind() const override { return "nccl"; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string device() const override { return "cuda:" + std::to_string(device_); }

  void start_all_reduce_sum(std::span<float> bucket) override;
  void start_device_all_reduce_sum(std::span<const std::span<float>> buckets, void* stream) override;
  bool poll() override;
  void wait_all() override;
  void all_reduce_sum_f64(std::span<double> data) override;
  void broadcast(std::span<std::byte> data, int root) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override {
    host_->abort(exit_code);  // MPI_Abort ends every rank, NCCL's kernels with them
    std::_Exit(exit_code);
  }

 private:
  // Runs a host collective of the mpi group; its failure breaks this group too.
  template <class F>
  auto on_host(F&& f) {
    try {
      return f(*host_);
    } catch (const ProcessGroupError& e) {
      gate_.mark_broken(e.what());
      throw;
    }
  }
  // Waits until the communicator has no operation in progress (creation, an enqueue).
  void wait_comm(const std::string& what);
  // Waits until done_ is reached (the reductions in flight have run).
  void wait_device(const std::string& what);
  // NCCL's answer of a call: ncclInProgress is fine (non-blocking), anything else fails.
  void check_nccl(ncclResult_t rc, const std::string& what);
  void check_cuda(cudaError_t e, const std::string& what) {
    if (e != cudaSuccess) fail(who() + ": " + what + " failed: " + cuda_text(e), false);
  }
  [[noreturn]] void fail(const std::string& message, bool timeout);
  [[noreturn]] void fail_timeout(const std::string& what);
  void abort_comm();

  std::unique_ptr<ProcessGroup> host_;  // host collectives and the bootstrap
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the group's own: reductions overlap the caller's stream
  cudaEvent_t ready_ = nullptr;    // on the caller's stream: its work so far is queued
  cudaEvent_t done_ = nullptr;     // on stream_: the reductions started so far have run
  void* caller_stream_ = nullptr;  // the stream of the reductions in flight
  bool device_pending_ = false;
  std::size_t pending_floats_ = 0, pending_buckets_ = 0;
  // Every call goes through it (call_guard.hpp): refuses a broken group and overlapping
  // threads (as the mpi group does; NCCL's non-blocking calls must not interleave either).
  CallGate gate_{[this] { return who(); }, "calls into one group must not overlap"};
};

NcclGroup::NcclGroup(const GroupOptions& options) : ProcessGroup(options) {
  const int devices = visible_devices();
  nccl();  // throws, before MPI is touched, where NCCL cannot be loaded
  GroupOptions host_options = options;
  host_options.kind = "mpi";
  host_ = make_mpi_group(host_options);
  try {
    device_ = local_rank(*host_) % devices;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    // Rank 0's id goes to every rank with a flag, so that its failure to make one is an
    // error on every rank at once rather than a timeout on the others.
    struct {
      std::int32_t ok = 0;
      ncclUniqueId id{};
    } hello;
    ncclResult_t id_rc = ncclSuccess;
    if (rank() == 0) {
      id_rc = nccl().get_unique_id(&hello.id);
      hello.ok = id_rc == ncclSuccess;
    }
    on_host([&](ProcessGroup& h) { h.broadcast(std::as_writable_bytes(std::span(&hello, 1)), 0); });
    if (!hello.ok)
      fail(who() + ": rank 0 could not make the NCCL unique id" +
               (rank() == 0 ? std::string(": ") + nccl().get_error_string(id_rc) : std::string()),
           false);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; the deadline is ours to keep
    check_nccl(nccl().comm_init_rank_config(&comm_, size(), hello.id, rank(), &config), "ncclCommInitRankConfig");
    wait_comm("creating the NCCL communicator (ncclCommInitRankConfig on cuda:" + std::to_string(device_) + ")");
  } catch (...) {
    abort_comm();
    if (done_) cudaEventDestroy(done_);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;  // host_ goes with the exception in flight: it then neither frees nor finalizes
  }
}

NcclGroup::~NcclGroup() {
  bool clean = gate_.usable() && std::uncaught_exceptions() == 0;
  if (clean && device_pending_) {
    try {
      wait_all();
    } catch (...) {
      clean = false;
    }
  }
  cudaSetDevice(device_);
  if (clean && comm_ != nullptr) {
    // Finalize flushes what is queued and waits for the peers: under the deadline too.
    try {
      check_nccl(nccl().comm_finalize(comm_), "ncclCommFinalize");
      wait_comm("finalizing the NCCL communicator");
      nccl().comm_destroy(comm_);
      comm_ = nullptr;
    } catch (...) {
      clean = false;
    }
  }
  abort_comm();  // what is left after an error
  cudaEventDestroy(done_);
  cudaEventDestroy(ready_);
  cudaStreamDestroy(stream_);
  // After an error a peer may be stuck: leave MPI alone (no free, no finalize), as the mpi
  // group does when it is destroyed broken; the process is about to exit anyway.
  if (!clean) (void)host_.release();
}

void NcclGroup::abort_comm() {
  if (comm_ == nullptr) return;
  nccl().comm_abort(comm_);  // ends the communicator's kernels; nothing more to learn from it
  comm_ = nullptr;
}

void NcclGroup::fail(const std::string& message, bool timeout) {
  gate_.mark_broken(message);
  abort_comm();
  if (timeout) throw CollectiveTimeout(message);
  throw ProcessGroupError(message);
}

void NcclGroup::fail_timeout(const std::string& what) {
  fail(who() + ": " + what + " did not complete within " + std::to_string(options().timeout.count()) +
           " ms: a peer rank is dead, hung or in a different collective. The NCCL communicator was aborted and the "
           "group is unusable; exit this process non-zero (under mpirun that ends the job) or call abort()",
       true);
}

void NcclGroup::check_nccl(ncclResult_t rc, const std::string& what) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  std::string detail = nccl().get_error_string(rc);
  if (comm_ != nullptr)
    if (const char* last = nccl().get_last_error(comm_); last != nullptr && *last != '\0') detail += ": " + std::string(last);
  fail(who() + ": " + what + " failed: " + detail, false);
}

// Polls in the mpi group's rhythm: spin (yielding) for 2 ms, where a healthy operation
// completes, then every 100 us so that a long wait leaves the core to a late peer.
void pause_since(Clock::time_point start) {
  if (Clock::now() - start < std::chrono::milliseconds(2))
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

void NcclGroup::wait_comm(const std::string& what) {
  const Clock::time_point start = Clock::now(), deadline = start + options().timeout;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    check_nccl(nccl().comm_get_async_error(comm_, &state), what + " (ncclCommGetAsyncError)");
    if (state == ncclSuccess) return;
    check_nccl(state, what);
    if (Clock::now() >= deadline) fail_timeout(what);
    pause_since(start);
  }
}

void NcclGroup::wait_device(const std::string& what) {
  const Clock::time_point start = Clock::now(), deadline = start + options().timeout;
  for (;;) {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check_cuda(e, what + " (cudaEventQuery)");
    // A peer's failure shows here, not on the event (which it would never reach).
    ncclResult_t state = ncclSuccess;
    check_nccl(nccl().comm_get_async_error(comm_, &state), what + " (ncclCommGetAsyncError)");
    check_nccl(state, what);
    if (Clock::now() >= deadline) fail_timeout(what);
    pause_since(start);
  }
}

void NcclGroup::start_all_reduce_sum(std::span<float> bucket) {
  CallGuard call(gate_, "start_all_reduce_sum");
  on_host([&](ProcessGroup& h) { h.start_all_reduce_sum(bucket); });
}

void NcclGroup::start_device_all_reduce_sum(std::span<const std::span<float>> buckets, void* stream) {
  CallGuard call(gate_, "start_device_all_reduce_sum");
  std::size_t floats = 0;
  const std::span<float>* first = nullptr;  // a non-empty bucket, to check where the memory is
  for (const auto& b : buckets) {
    check_bucket(b.size());
    floats += b.size();
    if (first == nullptr && !b.empty()) first = &b;
  }
  if (floats == 0) return;  // every rank passes the same lengths, so every rank skips it
  if (stream == nullptr)
    throw ProcessGroupError(who() + ": start_device_all_reduce_sum without a stream (a host backend's queue has "
                            "none: the nccl kind needs the model on " + device() + ")");
  if (device_pending_ && stream != caller_stream_)
    throw ProcessGroupError(who() + ": start_device_all_reduce_sum on another stream than the reductions in flight "
                            "(wait_all first)");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  auto* caller = static_cast<cudaStream_t>(stream);
#if CUDART_VERSION >= 12080
  int stream_device = -1;
  check_cuda(cudaStreamGetDevice(caller, &stream_device), "cudaStreamGetDevice");
  if (stream_device != device_)
    throw ProcessGroupError(who() + ": the caller's stream is on cuda:" + std::to_string(stream_device) +
                            ", the group's device is " + device() + " (put the model on " + device() + ")");
#endif
  cudaPointerAttributes where{};
  if (cudaPointerGetAttributes(&where, first->data()) != cudaSuccess || where.type == cudaMemoryTypeHost ||
      where.type == cudaMemoryTypeUnregistered || where.device != device_) {
    cudaGetLastError();
    throw ProcessGroupError(who() + ": start_device_all_reduce_sum of memory that is not on " + device() +
                            " (host memory goes through start_all_reduce_sum)");
  }
  // The reductions wait for everything queued on the caller's stream so far (backward's
  // kernels that wrote these gradients), not for what it queues later.
  check_cuda(cudaEventRecord(ready_, caller), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
  const std::string what = "enqueueing the NCCL all-reduce of " + std::to_string(floats) + " floats in " +
                           std::to_string(buckets.size()) + " bucket(s)";
  check_nccl(nccl().group_start(), "ncclGroupStart");
  for (const auto& b : buckets)
    if (!b.empty())
      check_nccl(nccl().all_reduce(b.data(), b.data(), b.size(), ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
  check_nccl(nccl().group_end(), "ncclGroupEnd");
  wait_comm(what);  // a non-blocking group call may still be enqueueing (connecting peers)
  check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
  caller_stream_ = stream;
  device_pending_ = true;
  pending_floats_ += floats;
  pending_buckets_ += buckets.size();
}

bool NcclGroup::poll() {
  CallGuard call(gate_, "poll");
  const bool host_done = on_host([](ProcessGroup& h) { return h.poll(); });
  if (!device_pending_) return host_done;
  const cudaError_t e = cudaEventQuery(done_);
  if (e != cudaSuccess && e != cudaErrorNotReady) check_cuda(e, "poll (cudaEventQuery)");
  ncclResult_t state = ncclSuccess;
  check_nccl(nccl().comm_get_async_error(comm_, &state), "poll (ncclCommGetAsyncError)");
  check_nccl(state, "the NCCL all-reduce in flight");
  return host_done && e == cudaSuccess;
}

void NcclGroup::wait_all() {
  CallGuard call(gate_, "wait_all");
  on_host([](ProcessGroup& h) { h.wait_all(); });
  if (!device_pending_) return;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  wait_device("the NCCL all-reduce of " + std::to_string(pending_floats_) + " floats in " +
              std::to_string(pending_buckets_) + " bucket(s)");
  // Already reached; the stream's wait makes the order explicit for whatever it runs next.
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(caller_stream_), done_, 0), "cudaStreamWaitEvent");
  device_pending_ = false;
  caller_stream_ = nullptr;
  pending_floats_ = pending_buckets_ = 0;
}

void NcclGroup::all_reduce_sum_f64(std::span<double> data) {
  CallGuard call(gate_, "all_reduce_sum_f64");
  on_host([&](ProcessGroup& h) { h.all_reduce_sum_f64(data); });
}

void NcclGroup::broadcast(std::span<std::byte> data, int root) {
  CallGuard call(gate_, "broadcast");
  on_host([&](ProcessGroup& h) { h.broadcast(data, root); });
}

void NcclGroup::barrier() {
  CallGuard call(gate_, "barrier");
  on_host([](ProcessGroup& h) { h.barrier(); });
}

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_group(const GroupOptions& options) {
  return std::make_unique<NcclGroup>(options);
}

}  // namespace codistill::dist
