#include "codistill/data/feed/batch_loader.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace codistill {

namespace {

// The cores this process may run on (its affinity mask: a container or taskset may give
// fewer than the machine has).
int usable_cores() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

bool prefetch_batches(const std::string& setting, const kernels::Device& device, int threads) {
  if (setting == "true") return true;
  if (setting == "false") return false;
  if (setting != "auto")
    throw std::invalid_argument(fmt::format("data.prefetch: '{}' (expected auto, true or false)", setting));
  return !device.is_cpu() || threads < usable_cores();
}

BatchLoader::BatchLoader(const data::Dataset& train, data::AugmentOptions augment, bool prefetch, RankSlice slice)
    : train_(train), augment_(augment), prefetch_(prefetch), slice_(slice) {
  if (slice_.ranks < 1 || slice_.rank < 0 || slice_.rank >= slice_.ranks)
    throw std::invalid_argument(fmt::format("BatchLoader: rank {} of {}", slice_.rank, slice_.ranks));
  if (prefetch_) helper_ = std::thread([this] { helper_main(); });
}

BatchLoader::~BatchLoader() {
  if (!helper_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  helper_.join();  // a queued job is finished first: its target may still be alive
}

void BatchLoader::helper_main() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || job_.has_value(); });
    if (!job_) return;  // stop_, nothing queued
    Job job = std::move(*job_);
    job_.reset();
    lock.unlock();
    std::exception_ptr failure;
    try {
      prepare(job.step, job.indices, *job.target, helper_label_rows_, /*parallel=*/false);
    } catch (...) {
      failure = std::current_exception();  // rethrown by load() if the batch is used
    }
    lock.lock();
    done_ = std::move(job);
    job_failure_ = failure;
    busy_ = false;
    cv_.notify_all();
  }
}

std::optional<BatchLoader::Job> BatchLoader::finish_job(std::exception_ptr& failure) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !busy_; });
  std::optional<Job> done = std::move(done_);
  done_.reset();
  failure = std::exchange(job_failure_, nullptr);
  return done;
}

void BatchLoader::prepare(std::int64_t step, const std::vector<std::int64_t>& indices, HostBatch& b,
                          std::vector<std::int32_t>& label_rows, bool parallel) const {
  const std::size_t parts = b.x.size(), ranks = static_cast<std::size_t>(slice_.ranks);
  if (parts == 0 || b.labels.size() != parts || indices.size() % (parts * ranks) != 0)
    throw std::logic_error(fmt::format("BatchLoader: {} indices for {} micro-batches on each of {} ranks",
                                       indices.size(), parts, ranks));
  // This rank's slice of the group's batch; `first` is its first row in that batch.
  const std::size_t mine = indices.size() / ranks, first = static_cast<std::size_t>(slice_.rank) * mine;
  const std::size_t per = mine / parts;
  const std::span<const std::int64_t> slice = std::span<const std::int64_t>(indices).subspan(first, mine);
  b.rows.assign(parts, 0);
  for (std::size_t i = 0; i < parts; ++i) {
    data::gather(train_, slice.subspan(i * per, per), b.x[i], label_rows, parallel);
    std::memcpy(b.labels[i].raw(), label_rows.data(), label_rows.size() * sizeof(std::int32_t));
    b.rows[i] = std::count_if(label_rows.begin(), label_rows.end(), [](std::int32_t y) { return y != -1; });
    // The row within the whole (group's) batch, so that micro-batches and ranks change nothing.
    data::augment_batch(augment_, b.x[i], step, static_cast<std::int64_t>(first + i * per));
  }
  // Every rank's loss is weighted by its share of the group's counted rows (train/step.cpp);
  // the other ranks' labels are read here rather than exchanged: all ranks hold the data.
  if (ranks == 1) {
    b.group_rows = 0;
    for (std::int64_t r : b.rows) b.group_rows += r;
  } else {
    b.group_rows = std::count_if(indices.begin(), indices.end(),
                                 [&](std::int64_t j) { return train_.labels[static_cast<std::size_t>(j)] != -1; });
  }
}

void BatchLoader::load(std::int64_t step, data::BatchSampler& sampler, HostBatch& into, HostBatch* next) {
  std::exception_ptr failure;
  const std::optional<Job> ready = finish_job(failure);  // the helper no longer writes anywhere
  const data::SamplerPosition from = sampler.position();
  sampler.next_indices(indices_);
  const bool usable =
      ready && ready->step == step && ready->from == from && ready->target == &into && ready->indices == indices_;
  if (usable) {
    if (failure) std::rethrow_exception(failure);
    ++prefetched_;
  } else {
    // The step waits for this batch: the gather may use the step's threads.
    prepare(step, indices_, into, label_rows_, /*parallel=*/true);
    ++inline_;
  }
  if (!prefetch_ || !next) return;
  // The look-ahead sampler follows the real one: a copy (the same shard and options) set to
  // its position, which draws what the real one will draw next.
  if (!ahead_ || ahead_source_ != &sampler) {
    ahead_ = std::make_unique<data::BatchSampler>(sampler);
    ahead_source_ = &sampler;
  }
  else if (ahead_->position() != sampler.position())
    ahead_->set_position(sampler.position());
  Job job;
  job.step = step + 1;
  job.from = sampler.position();
  ahead_->next_indices(job.indices);
  job.target = next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
    busy_ = true;
  }
  cv_.notify_all();
}

}  // namespace codistill
