#include "codistill/engine/batch_loader.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace codistill {

BatchLoader::BatchLoader(const data::Dataset& train, data::AugmentOptions augment, bool prefetch)
    : train_(train), augment_(augment), prefetch_(prefetch) {
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
      prepare(job.step, job.indices, *job.target, helper_label_rows_);
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
                          std::vector<std::int32_t>& label_rows) const {
  const std::size_t parts = b.x.size();
  if (parts == 0 || b.labels.size() != parts || indices.size() % parts != 0)
    throw std::logic_error(fmt::format("BatchLoader: {} indices for {} micro-batches", indices.size(), parts));
  const std::size_t per = indices.size() / parts;
  b.rows.assign(parts, 0);
  for (std::size_t i = 0; i < parts; ++i) {
    data::gather(train_, std::span<const std::int64_t>(indices).subspan(i * per, per), b.x[i], label_rows);
    std::memcpy(b.labels[i].raw(), label_rows.data(), label_rows.size() * sizeof(std::int32_t));
    b.rows[i] = std::count_if(label_rows.begin(), label_rows.end(), [](std::int32_t y) { return y != -1; });
    // The row within the whole batch, so that micro-batches change nothing.
    data::augment_batch(augment_, b.x[i], step, static_cast<std::int64_t>(i * per));
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
    prepare(step, indices_, into, label_rows_);
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
