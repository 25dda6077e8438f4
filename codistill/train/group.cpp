#include "codistill/train/group.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <stdexcept>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "codistill/dist/node_layout.hpp"
#include "codistill/nn/layers/batchnorm.hpp"

namespace codistill {

dist::GroupOptions group_options(const GroupConfig& cfg) {
  dist::GroupOptions o;
  o.kind = cfg.kind;
  o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(cfg.timeout_s * 1000.0)));
  o.bucket_bytes = std::max<std::size_t>(4, static_cast<std::size_t>(cfg.bucket_mb * 1024.0 * 1024.0));
  return o;
}

namespace {

void check_f32(const kernels::Tensor& grads) {
  if (grads.dtype() != kernels::DType::f32)
    throw std::invalid_argument(fmt::format("gradient all-reduce: the gradient block is {}, not float32",
                                            kernels::dtype_name(grads.dtype())));
}

std::span<float> slice(kernels::Tensor& grads, const dist::Bucket& b) {
  return {static_cast<float*>(grads.raw()) + b.begin, b.end - b.begin};
}

}  // namespace

void check_group_device(const dist::ProcessGroup& group, const kernels::Device& device) {
  if (!group.reduces_device_memory() || device.str() == group.device()) return;
  throw std::invalid_argument(fmt::format(
      "process group kind {} all-reduces the memory of {} (this rank's device: its local rank on the node modulo "
      "the visible GPUs), but the model is on {}: train on {} (device: {}), or use group.kind mpi, which reduces "
      "through host memory from any device",
      group.kind(), group.device(), device.str(), group.device(), group.device()));
}

void all_reduce_gradients(dist::ProcessGroup& group, kernels::Tensor& grads, kernels::Queue& q) {
  if (group.size() == 1 || grads.numel() == 0) return;
  check_f32(grads);
  if (group.reduces_device_memory()) {
    check_group_device(group, grads.device());
    std::vector<std::span<float>> buckets;
    for (const dist::Bucket& b : dist::bucket_ranges(static_cast<std::size_t>(grads.numel()),
                                                     group.options().bucket_bytes))
      buckets.push_back(slice(grads, b));
    group.start_device_all_reduce_sum(buckets, q.native_stream());  // after backward's kernels on q
    group.wait_all();  // q's later work (the optimizer) waits for the sums
    return;
  }
  // Backward has queued the gradients; MPI reads host memory once they are there.
  kernels::Tensor stage = q.backend().staging_for(grads);
  const bool copy = !stage.same_memory(grads);
  if (copy) q.copy(stage, grads);
  q.synchronize();
  group.all_reduce_sum(std::span<float>(stage.data<float>(), static_cast<std::size_t>(stage.numel())));
  if (copy) {
    q.copy(grads, stage);
    q.synchronize();  // the staging memory is released on return
  }
}

GradientReducer::GradientReducer(dist::ProcessGroup& group, kernels::Tensor& grads, kernels::Queue& q)
    : group_(group), grads_(grads), q_(q) {
  check_f32(grads);
  if (group.reduces_device_memory()) {
    check_group_device(group, grads.device());
    path_ = Path::device;
  } else {
    path_ = q.backend().staging_for(grads).same_memory(grads) ? Path::host : Path::staged;
  }
  buckets_ = dist::bucket_ranges(static_cast<std::size_t>(grads.numel()), group.options().bucket_bytes);
}

void GradientReducer::start_down_to(std::int64_t first) {
  std::vector<std::span<float>> device_buckets;  // started together: one fused launch
  while (started_ < buckets_.size()) {
    const dist::Bucket& b = buckets_[buckets_.size() - 1 - started_];
    if (static_cast<std::int64_t>(b.begin) < first) break;
    if (path_ == Path::device)
      device_buckets.push_back(slice(grads_, b));
    else
      group_.start_all_reduce_sum(slice(grads_, b));
    ++started_;
  }
  if (!device_buckets.empty()) group_.start_device_all_reduce_sum(device_buckets, q_.native_stream());
}

void GradientReducer::ready(std::int64_t first) {
  if (path_ == Path::staged || group_.size() == 1) return;
  // Host memory: the gradients queued so far must be in memory (a no-op on the CPU). Device
  // memory: the group orders its reductions after them on the queue's stream.
  if (path_ == Path::host) q_.synchronize();
  start_down_to(first);
  if (first > 0) overlapped_ = started_;  // some layers' backward still to run
  group_.poll();
}

void GradientReducer::finish() {
  if (group_.size() == 1) return;
  if (path_ == Path::staged) {
    all_reduce_gradients(group_, grads_, q_);
    return;
  }
  if (path_ == Path::host) q_.synchronize();
  early_ = overlapped_;
  start_down_to(0);
  group_.wait_all();
  started_ = overlapped_ = 0;
}

void broadcast_values(dist::ProcessGroup& group, std::vector<std::int64_t>& values) {
  if (group.size() == 1 || values.empty()) return;
  group.broadcast(std::as_writable_bytes(std::span<std::int64_t>(values)), 0);
}

std::vector<checkpoint::TeacherStep> share_teacher_steps(dist::ProcessGroup& group,
                                                         const std::vector<checkpoint::TeacherStep>& mine,
                                                         std::size_t max) {
  if (group.size() == 1) return mine;
  if (mine.size() > max)
    throw std::logic_error(fmt::format("share_teacher_steps: {} teachers, at most {} expected", mine.size(), max));
  // [count, worker_0, step_0, worker_1, step_1, ...], fixed length on every rank.
  std::vector<std::int64_t> wire(1 + 2 * max, 0);
  wire[0] = static_cast<std::int64_t>(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    wire[1 + 2 * i] = mine[i].worker;
    wire[2 + 2 * i] = mine[i].step;
  }
  broadcast_values(group, wire);
  if (wire[0] < 0 || static_cast<std::size_t>(wire[0]) > max)
    throw std::runtime_error(fmt::format("rank 0 sent {} teachers (at most {} expected)", wire[0], max));
  std::vector<checkpoint::TeacherStep> out(static_cast<std::size_t>(wire[0]));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = {wire[1 + 2 * i], wire[2 + 2 * i]};
  return out;
}

namespace {

// FNV-1a of the run directory's absolute path: the run's part of a shared file's name.
std::uint64_t run_key(const std::string& dir) {
  std::error_code ec;
  const std::string path = std::filesystem::absolute(dir, ec).lexically_normal().string();
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : path) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace

TeacherSharing plan_teacher_sharing(const Config& c, dist::ProcessGroup& group, const kernels::Device& device,
                                    std::string& why) {
  TeacherSharing s;
  if (!c.codistill.enabled) {
    why = "codistill.enabled is false";
  } else if (c.codistill.share_teachers == "off") {
    why = "codistill.share_teachers is off";
  } else if (group.size() == 1) {
    why = "this worker is a single rank";
  }
  if (!why.empty()) return s;
  s.coordinated = true;  // the same on every rank: the config and the group size are
  const dist::NodeLayout node = dist::node_layout(group);
  const bool writer = node.leader == group.rank();
  const std::string& dir = c.codistill.share_dir;
  if (node.ranks_here < 2)
    why = "no other rank of this worker group runs on this node";
  else if (!device.is_cpu())
    why = "the teachers are on " + device.str() + ", in each rank's own device memory";
  else if (::access(dir.c_str(), writer ? (W_OK | X_OK) : X_OK) != 0)
    why = fmt::format("{} (codistill.share_dir) cannot be {}: {}", dir, writer ? "written" : "read", std::strerror(errno));
  if (!why.empty()) return s;
  s.enabled = true;
  s.writer = writer;
  s.dir = dir;
  s.writer_pid = node.leader_pid;
  s.name = fmt::format("{:016x}.w{}", run_key(c.run.dir), c.run.worker);
  return s;
}

void start_teacher_sharing(const Config& c, dist::ProcessGroup& group, const kernels::Device& device,
                           TeacherPool& pool, spdlog::logger& log) {
  std::string why;
  TeacherSharing plan = plan_teacher_sharing(c, group, device, why);
  if (plan.enabled)
    log.info("teacher sharing: this rank {} its node's teachers in {}", plan.writer ? "writes" : "maps", plan.dir);
  else
    log.info("teacher sharing: off ({}); this rank holds its own teachers", why);
  pool.set_sharing(std::move(plan));
}

StepAgreement agree_after_step(dist::ProcessGroup& group, bool stop, double loss, double ce, double distill) {
  StepAgreement a{stop, loss, ce, distill};
  if (group.size() == 1) return a;
  // Floats suffice: the stop flags are counted and the loss terms are only logged.
  float v[4] = {stop ? 1.0f : 0.0f, static_cast<float>(loss), static_cast<float>(ce), static_cast<float>(distill)};
  group.all_reduce_sum(std::span<float>(v, 4));
  a.stop = v[0] > 0.5f;
  a.loss = v[1];
  a.ce = v[2];
  a.distill = v[3];
  return a;
}

namespace {

// The process group as nn's GroupSum (nn does not depend on dist).
class ProcessGroupSum final : public GroupSum {
 public:
  explicit ProcessGroupSum(dist::ProcessGroup& group) : group_(group) {}
  void all_reduce_sum(std::span<double> values) override { group_.all_reduce_sum_f64(values); }

 private:
  dist::ProcessGroup& group_;
};

}  // namespace

int synchronize_batchnorm(dist::ProcessGroup& group, Model& model) {
  std::vector<BatchNorm*> layers;
  visit_modules(model.root(), [&](const std::string&, Module& m) {
    if (auto* bn = dynamic_cast<BatchNorm*>(&m)) layers.push_back(bn);
  });
  if (layers.empty()) return 0;  // nothing to synchronize, whatever the backend
  const kernels::Backend& backend = model.queue().backend();
  if (!backend.supports(kernels::Op::batchnorm_sync, kernels::DType::f32))
    throw std::invalid_argument(fmt::format("synchronized BatchNorm is not built for the {} backend",
                                            backend.name()));
  auto sum = std::make_shared<ProcessGroupSum>(group);
  for (BatchNorm* bn : layers) bn->set_group_sum(sum);
  return static_cast<int>(layers.size());
}

}  // namespace codistill
