// train/group.hpp in one process: the config mapped onto the seam's options, and every
// exchange the identity on a group of one (a single process must train exactly as before).
#include <catch2/catch.hpp>

#include <cstdlib>

#include "codistill/train/group.hpp"
#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"

using namespace codistill;

TEST_CASE("group options come from the group section", "[train][group]") {
  GroupConfig g;
  g.kind = "mpi";
  g.timeout_s = 2.5;
  g.bucket_mb = 0.5;
  const dist::GroupOptions o = group_options(g);
  CHECK(o.kind == "mpi");
  CHECK(o.timeout.count() == 2500);
  CHECK(o.bucket_bytes == 512u * 1024u);
  CHECK_NOTHROW(dist::validate(o));
  g.bucket_mb = 1e-9;  // less than a float: one float per bucket, never zero
  CHECK(group_options(g).bucket_bytes == 4u);
}

TEST_CASE("on a group of one every exchange leaves its data as it is", "[train][group]") {
  GroupConfig g;
  g.kind = "single";
  auto group = dist::make_process_group(group_options(g));
  REQUIRE(group->size() == 1);

  std::vector<std::int64_t> values = {7, -3};
  broadcast_values(*group, values);
  CHECK(values == std::vector<std::int64_t>{7, -3});

  const std::vector<checkpoint::TeacherStep> mine = {{1, 200}, {2, 150}};
  CHECK(share_teacher_steps(*group, mine, 2) == mine);

  // The loss terms keep their double precision (no float round trip in one process).
  const StepAgreement a = agree_after_step(*group, true, 1.0 / 3.0, 0.25, 1e-12);
  CHECK(a.stop);
  CHECK(a.loss == 1.0 / 3.0);
  CHECK(a.ce == 0.25);
  CHECK(a.distill == 1e-12);
  CHECK_FALSE(agree_after_step(*group, false, 0, 0, 0).stop);
}

namespace {

// A group of 2 that says it reduces the memory of `device` (as nccl says "cuda:K") and
// stands in for its peer: each device bucket is doubled at wait_all (the sum of 2 equal
// ranks). It records the calls, so that the reducer's device path is checked on the CPU.
class FakeDeviceGroup final : public dist::ProcessGroup {
 public:
  FakeDeviceGroup(std::string device, std::size_t bucket_bytes)
      : ProcessGroup([&] {
          dist::GroupOptions o;
          o.bucket_bytes = bucket_bytes;
          return o;
        }()),
        device_(std::move(device)) {}

  std::string kind() const override { return "fake"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string device() const override { return device_; }
  void start_all_reduce_sum(std::span<float>) override { ++host_starts; }
  void start_device_all_reduce_sum(std::span<const std::span<float>> buckets, void* stream) override {
    calls.emplace_back();
    for (const auto& b : buckets) {
      calls.back().push_back(b.size());
      in_flight.push_back(b);
    }
    streams.push_back(stream);
  }
  bool poll() override { return in_flight.empty(); }
  void wait_all() override {
    ++waits;
    for (const auto& b : in_flight)
      for (float& x : b) x *= 2;
    in_flight.clear();
  }
  void all_reduce_sum_f64(std::span<double>) override {}
  void broadcast(std::span<std::byte>, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }

  std::vector<std::vector<std::size_t>> calls;  // bucket lengths of each device start
  std::vector<void*> streams;
  std::vector<std::span<float>> in_flight;
  int host_starts = 0, waits = 0;

 private:
  std::string device_;
};

}  // namespace

TEST_CASE("a group that reduces device memory needs the model on its device", "[train][group]") {
  FakeDeviceGroup nccl_like("cuda:1", 1 << 20);
  CHECK_NOTHROW(check_group_device(nccl_like, kernels::Device::cuda(1)));
  for (const kernels::Device d : {kernels::Device::cpu(), kernels::Device::cuda(0)}) {
    INFO(d.str());
    CHECK_THROWS_AS(check_group_device(nccl_like, d), std::invalid_argument);
    CHECK_THROWS_WITH(check_group_device(nccl_like, d),
                      Catch::Contains("all-reduces the memory of cuda:1") &&
                          Catch::Contains("but the model is on " + d.str()) && Catch::Contains("group.kind mpi"));
  }
  // The reducer refuses it up front (here: gradients on the CPU, the group on a GPU).
  auto queue = kernels::backend_for(kernels::Device::cpu()).make_queue(kernels::Device::cpu());
  kernels::Tensor grads = kernels::Tensor::zeros({8});
  CHECK_THROWS_WITH(GradientReducer(nccl_like, grads, *queue), Catch::Contains("but the model is on cpu"));
  CHECK_THROWS_WITH(all_reduce_gradients(nccl_like, grads, *queue), Catch::Contains("but the model is on cpu"));
  // Host-memory groups take any device.
  GroupConfig g;
  g.kind = "single";
  auto single = dist::make_process_group(group_options(g));
  CHECK_NOTHROW(check_group_device(*single, kernels::Device::cuda(3)));
}

TEST_CASE("the reducer hands device buckets to the group where they are, fused per call", "[train][group]") {
  // A "device" that is the CPU, so that the device path runs here: 10 floats in buckets of
  // 3 -> [0,3) [3,6) [6,9) [9,10).
  FakeDeviceGroup group("cpu", 3 * sizeof(float));
  auto queue = kernels::backend_for(kernels::Device::cpu()).make_queue(kernels::Device::cpu());
  std::vector<float> values(10);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = float(i + 1);
  kernels::Tensor grads = kernels::Tensor::from_vector({10}, values);
  GradientReducer reducer(group, grads, *queue);
  CHECK(reducer.buckets() == 4);
  reducer.ready(5);  // [5, 10) final: the two buckets wholly inside start, last first, in one call
  REQUIRE(group.calls.size() == 1);
  CHECK(group.calls[0] == std::vector<std::size_t>{1, 3});
  CHECK(group.in_flight[0].data() == grads.data<float>() + 9);  // the block itself: no staging copy
  reducer.ready(3);  // [3, 6) now too
  REQUIRE(group.calls.size() == 2);
  CHECK(group.calls[1] == std::vector<std::size_t>{3});
  CHECK(group.waits == 0);  // nothing waited for while backward runs
  reducer.finish();         // the rest in one call, then one wait
  REQUIRE(group.calls.size() == 3);
  CHECK(group.calls[2] == std::vector<std::size_t>{3});
  CHECK(group.waits == 1);
  CHECK(group.host_starts == 0);
  CHECK(reducer.started_early() == 3);
  for (void* s : group.streams) CHECK(s == queue->native_stream());
  for (std::size_t i = 0; i < values.size(); ++i) CHECK(grads.data<float>()[i] == 2 * values[i]);
  // The unoverlapped form: every bucket in one call.
  all_reduce_gradients(group, grads, *queue);
  REQUIRE(group.calls.size() == 4);
  CHECK(group.calls[3] == std::vector<std::size_t>{3, 3, 3, 1});
  CHECK(grads.data<float>()[9] == 40.0f);
}
