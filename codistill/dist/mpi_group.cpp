// Kind "mpi" on the MPI C API. Every collective is MPI's non-blocking form (MPI_Iallreduce,
// MPI_Ibcast, MPI_Ibarrier) polled with MPI_Testall against a deadline: MPI has no timeout
// of its own, and a blocking call (or MPI_Wait) on a peer that is hung or never enters the
// collective waits forever. OpenMPI's mpirun ends the job when a rank exits non-zero or is
// killed, so a dead peer usually takes this rank down before its deadline; the deadline is
// for everything else (a hung peer, one stuck in another collective, srun without
// --kill-on-bad-exit).
#include "codistill/dist/mpi_group.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "codistill/dist/call_guard.hpp"

namespace codistill::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown MPI thread level";
  }
}

// MPI is initialized once per process and cannot be initialized again after
// MPI_Finalize, so its lifetime is the process's, not one group's: this counts the live
// groups and finalizes after the last one, unless some group ended broken (finalizing
// then could wait on the peer that broke it). Process-wide because MPI itself is.
class MpiLifetime {
 public:
  static MpiLifetime& get() {
    static MpiLifetime instance;
    return instance;
  }

  void acquire() {
    std::lock_guard lock(mutex_);
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized)
      throw ProcessGroupError(
          "mpi process group: MPI was finalized when the last mpi group of this process was destroyed, and MPI "
          "cannot be initialized twice: keep one group for the life of the process");
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      // SERIALIZED, not FUNNELED: the trainer has helper threads and may move the group's
      // calls to one of them (to drive reductions while backward runs); SERIALIZED lets
      // any thread call, one at a time (the group checks that), FUNNELED only the thread
      // that initialized MPI. Calls still never overlap, so MPI needs no locking for it
      // (that is MPI_THREAD_MULTIPLE's price).
      // OpenMPI's shared-memory transport copies large messages between ranks of one node
      // through the kernel's cross-memory attach unless told otherwise; in this project's VMs
      // that single copy is the slow path: a 1 MB all-reduce of 2 ranks took 0.18 ms with it
      // and 0.09 ms without (copy-in/copy-out through the shared segment), which lifted a
      // 2-rank MLP group from 0.88x to 0.94x of one 2-thread process
      // (bench/results/group_cpu_single_copy.txt). A value the user set wins (setenv does
      // not overwrite): OMPI_MCA_btl_vader_single_copy_mechanism=cma (or xpmem) restores it.
      // Read by MPI_Init below; only intra-node messages take that transport.
      ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", /*overwrite=*/0);
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (rc != MPI_SUCCESS) throw ProcessGroupError("mpi process group: MPI_Init_thread failed: " + mpi_error_text(rc));
      initialized_here_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED)
      throw ProcessGroupError(std::string("mpi process group: MPI provides only ") + thread_level_name(provided) +
                              ", the group needs MPI_THREAD_SERIALIZED (its calls may come from a helper thread, "
                              "one at a time)");
    ++live_;
  }

  void release(bool clean) {
    std::lock_guard lock(mutex_);
    if (!clean) unsafe_to_finalize_ = true;
    if (--live_ == 0 && initialized_here_ && !unsafe_to_finalize_) MPI_Finalize();
  }

 private:
  std::mutex mutex_;
  int live_ = 0;
  bool initialized_here_ = false;
  bool unsafe_to_finalize_ = false;
};

class MpiGroup final : public ProcessGroup {
 public:
  explicit MpiGroup(const GroupOptions& options);
  ~MpiGroup() override;

  std::string kind() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void start_all_reduce_sum(std::span<float> bucket) override;
  bool poll() override;
  void wait_all() override;
  void all_reduce_sum_f64(std::span<double> data) override;
  void broadcast(std::span<std::byte> data, int root) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;

 private:
  // Polls `requests` until all complete; throws CollectiveTimeout when the deadline passes
  // first. `what` describes the collective for the message.
  void complete(std::vector<MPI_Request>& requests, const std::string& what);
  // Marks the group broken and throws.
  [[noreturn]] void fail(const std::string& message, bool timeout);
  void check_rc(int rc, const std::string& what) {
    if (rc != MPI_SUCCESS) fail(who() + ": " + what + " failed: " + mpi_error_text(rc), false);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;  // reductions in flight, in the order started
  std::size_t pending_floats_ = 0;
  // Every call goes through it (call_guard.hpp): refuses a broken group, and a second
  // thread entering while one is inside (MPI_THREAD_SERIALIZED is a promise the caller
  // keeps; this makes a broken promise an error instead of memory corruption inside MPI).
  CallGate gate_{[this] { return who(); },
                 "MPI runs at MPI_THREAD_SERIALIZED, so calls into one group must not overlap"};
};

MpiGroup::MpiGroup(const GroupOptions& options) : ProcessGroup(options) {
  MpiLifetime::get().acquire();
  try {
    // A communicator of our own, so that our collectives never match another library's on
    // MPI_COMM_WORLD. MPI_Comm_idup, not MPI_Comm_dup: it is a collective too, and a rank
    // that never starts its group must not hang the others here either.
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request);
    if (rc != MPI_SUCCESS) throw ProcessGroupError("mpi process group: MPI_Comm_idup failed: " + mpi_error_text(rc));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    std::vector<MPI_Request> requests{request};
    complete(requests, "creating the group (MPI_Comm_idup of MPI_COMM_WORLD)");
    // Errors come back as codes (turned into exceptions with context), instead of MPI's
    // default of aborting the job with a message of its own.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  } catch (...) {
    MpiLifetime::get().release(false);
    throw;
  }
}

MpiGroup::~MpiGroup() {
  // Destroyed while an exception unwinds: this rank is failing, and its peers may be
  // waiting for it in a collective, so neither free the communicator nor finalize (both
  // may wait for them); the process exits and the launcher ends the job.
  bool clean = gate_.usable() && std::uncaught_exceptions() == 0;
  if (clean && !pending_.empty()) {
    try {
      wait_all();
    } catch (...) {
      clean = false;
    }
  }
  if (clean) MPI_Comm_free(&comm_);
  MpiLifetime::get().release(clean);
}

void MpiGroup::fail(const std::string& message, bool timeout) {
  gate_.mark_broken(message);
  if (timeout) throw CollectiveTimeout(message);
  throw ProcessGroupError(message);
}

void MpiGroup::complete(std::vector<MPI_Request>& requests, const std::string& what) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options().timeout;
  for (;;) {
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) fail(who() + ": " + what + " failed: " + mpi_error_text(rc), false);
    if (done) {
      requests.clear();
      return;
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      fail(who() + ": " + what + " did not complete within " + std::to_string(options().timeout.count()) +
               " ms: a peer rank is dead, hung or in a different collective. The group is unusable; exit this "
               "process non-zero (under mpirun that ends the job) or call abort()",
           true);
    // Spin (yielding) for the first 2 ms, where a healthy collective completes; then poll
    // every 100 us so that a long wait does not take the core from a late peer
    // oversubscribed on it.
    if (now - start < std::chrono::milliseconds(2))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void MpiGroup::start_all_reduce_sum(std::span<float> bucket) {
  CallGuard call(gate_, "start_all_reduce_sum");
  check_bucket(bucket.size());
  if (bucket.empty()) return;  // every rank passes the same lengths, so every rank skips it
  MPI_Request request = MPI_REQUEST_NULL;
  check_rc(MPI_Iallreduce(MPI_IN_PLACE, bucket.data(), static_cast<int>(bucket.size()), MPI_FLOAT, MPI_SUM, comm_,
                          &request),
           "MPI_Iallreduce of " + std::to_string(bucket.size()) + " floats");
  pending_.push_back(request);
  pending_floats_ += bucket.size();
}

bool MpiGroup::poll() {
  CallGuard call(gate_, "poll");
  if (pending_.empty()) return true;
  int done = 0;
  check_rc(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE),
           "all_reduce_sum (MPI_Testall)");
  if (done) {
    pending_.clear();
    pending_floats_ = 0;
  }
  return done != 0;
}

void MpiGroup::wait_all() {
  CallGuard call(gate_, "wait_all");
  if (pending_.empty()) return;
  std::string what = "all_reduce_sum of " + std::to_string(pending_floats_) + " floats in " +
                     std::to_string(pending_.size()) + " bucket(s)";
  complete(pending_, what);
  pending_floats_ = 0;
}

void MpiGroup::all_reduce_sum_f64(std::span<double> data) {
  CallGuard call(gate_, "all_reduce_sum_f64");
  check_bucket(data.size());
  if (data.empty()) return;
  std::vector<MPI_Request> requests{MPI_REQUEST_NULL};
  check_rc(MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_DOUBLE, MPI_SUM, comm_,
                          &requests.back()),
           "MPI_Iallreduce of " + std::to_string(data.size()) + " doubles");
  complete(requests, "all_reduce_sum_f64 of " + std::to_string(data.size()) + " doubles");
}

void MpiGroup::broadcast(std::span<std::byte> data, int root) {
  CallGuard call(gate_, "broadcast");
  check_root(root, "broadcast");
  // MPI counts are int: a buffer over 2 GiB goes as several broadcasts, all in flight.
  std::vector<MPI_Request> requests;
  for (std::size_t at = 0; at < data.size(); at += INT_MAX) {
    int count = static_cast<int>(std::min<std::size_t>(INT_MAX, data.size() - at));
    requests.push_back(MPI_REQUEST_NULL);
    check_rc(MPI_Ibcast(data.data() + at, count, MPI_BYTE, root, comm_, &requests.back()),
             "MPI_Ibcast of " + std::to_string(count) + " bytes");
  }
  complete(requests, "broadcast of " + std::to_string(data.size()) + " bytes from rank " + std::to_string(root));
}

void MpiGroup::barrier() {
  CallGuard call(gate_, "barrier");
  std::vector<MPI_Request> requests{MPI_REQUEST_NULL};
  check_rc(MPI_Ibarrier(comm_, &requests.back()), "MPI_Ibarrier");
  complete(requests, "barrier");
}

void MpiGroup::abort(int exit_code) {
  MPI_Abort(comm_ != MPI_COMM_NULL ? comm_ : MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort should not return; if it does, still end this rank
}

}  // namespace

std::unique_ptr<ProcessGroup> make_mpi_group(const GroupOptions& options) {
  return std::make_unique<MpiGroup>(options);
}

}  // namespace codistill::dist
