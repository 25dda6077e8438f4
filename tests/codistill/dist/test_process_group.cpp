// The single-process group, the options, the buckets and the kind-keyed factory.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <climits>
#include <iostream>
#include <string>
#include <vector>

#include "codistill/dist/process_group.hpp"
#include "kernels/backend.hpp"
#include "support/process.hpp"

using namespace codistill::dist;

namespace {

GroupOptions single_options() {
  GroupOptions o;
  o.kind = "single";
  o.bucket_bytes = 12;
  return o;
}

}  // namespace

TEST_CASE("single group: rank 0 of 1, every collective the identity", "[dist]") {
  auto g = make_process_group(single_options());
  CHECK(g->kind() == "single");
  CHECK(g->rank() == 0);
  CHECK(g->size() == 1);
  std::vector<float> data = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  const std::vector<float> before = data;
  g->all_reduce_sum(data);      // 2 buckets of 3 floats, the last one shorter
  g->all_reduce_sum(data, 4);   // a bucket per float
  CHECK(data == before);
  g->start_all_reduce_sum(std::span(data).subspan(1, 3));
  CHECK(g->poll());
  g->wait_all();
  CHECK(data == before);
  std::vector<std::byte> bytes = {std::byte{1}, std::byte{2}};
  g->broadcast(bytes, 0);
  g->broadcast(std::span<float>(data), 0);
  CHECK(bytes == std::vector<std::byte>{std::byte{1}, std::byte{2}});
  CHECK(data == before);
  g->barrier();
}

TEST_CASE("single group: a root outside the group is an error naming it", "[dist]") {
  auto g = make_process_group(single_options());
  std::vector<std::byte> bytes(4);
  CHECK_THROWS_WITH(g->broadcast(bytes, 1), Catch::Contains("root 1") && Catch::Contains("group of 1"));
  CHECK_THROWS_AS(g->broadcast(bytes, -1), ProcessGroupError);
}

TEST_CASE("bucket_ranges: equal buckets, the last one shorter, covering the span once", "[dist]") {
  auto b = bucket_ranges(10, 12);  // 3 floats per bucket
  REQUIRE(b.size() == 4);
  CHECK(b[0].begin == 0);
  CHECK(b[0].end == 3);
  CHECK(b[3].begin == 9);
  CHECK(b[3].end == 10);
  CHECK(bucket_ranges(10, 14).size() == 4);     // 14 bytes round down to 3 floats
  CHECK(bucket_ranges(10, 1 << 20).size() == 1);  // larger than the span: one bucket
  CHECK(bucket_ranges(0, 4).empty());
  CHECK(bucket_ranges(6, 8).size() == 3);         // dividing: no short bucket
  auto huge = bucket_ranges(std::size_t{INT_MAX} + 5, std::size_t{1} << 40);  // capped at MPI's int count
  REQUIRE(huge.size() == 2);
  CHECK(huge[0].end == std::size_t{INT_MAX});
  CHECK_THROWS_WITH(bucket_ranges(10, 3), Catch::Contains("bucket_bytes 3"));
}

TEST_CASE("options: bad timeout or bucket size is refused naming the option", "[dist]") {
  GroupOptions o = single_options();
  o.timeout = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH(make_process_group(o), Catch::Contains("timeout must be positive"));
  o = single_options();
  o.bucket_bytes = 2;
  CHECK_THROWS_WITH(make_process_group(o), Catch::Contains("bucket_bytes must be at least 4"));
}

TEST_CASE("factory: an unknown kind lists the valid ones", "[dist]") {
  GroupOptions o;
  o.kind = "gloo";
  CHECK_THROWS_AS(make_process_group(o), std::invalid_argument);
  CHECK_THROWS_WITH(make_process_group(o),
                    Catch::Contains("unknown process group kind 'gloo'") &&
                        Catch::Contains("valid: auto, single, mpi, nccl"));
  CHECK_THROWS_WITH(kind_unavailable_reason("MPI"), Catch::Contains("valid: auto, single, mpi, nccl"));
}

TEST_CASE("factory: a listed kind that is not built says why", "[dist]") {
  CHECK(kind_unavailable_reason("single").empty());
  CHECK(kind_unavailable_reason("auto").empty());
  // mpi is either built (no reason) or says how to get it.
  std::string mpi = kind_unavailable_reason("mpi");
  if (!mpi.empty()) CHECK_THAT(mpi, Catch::Contains("libopenmpi-dev"));
}

TEST_CASE("factory: nccl says why it is not built, or without a GPU that none is visible", "[dist][nccl]") {
  GroupOptions o;
  o.kind = "nccl";
  const std::string why = kind_unavailable_reason("nccl");
  if (!why.empty()) {
    // Not built: which of its three requirements this build lacks, and how to get it.
    INFO(why);
    CHECK_THAT(why, Catch::Contains("this build has no NCCL process group: "));
    CHECK((why.find("CUDA") != std::string::npos || why.find("MPI") != std::string::npos ||
           why.find("NCCL was not found") != std::string::npos));
    CHECK_THROWS_AS(make_process_group(o), ProcessGroupError);
    CHECK_THROWS_WITH(make_process_group(o), Catch::StartsWith("process group kind 'nccl': " + why));
    return;
  }
  // Built. Without a GPU the maker refuses before MPI is touched (so this runs in one
  // process); with one, the [cuda] multi-process test makes real groups, and this case
  // runs again in a child process that sees no GPU (CUDA_VISIBLE_DEVICES empty), so that
  // it does its work on a GPU machine too.
  if (codistill::kernels::backend_for(codistill::kernels::DeviceKind::cuda).device_count() > 0) {
    codistill::test::TempDir dir;
    const std::string name = "factory: nccl says why it is not built\\, or without a GPU that none is visible";
    const auto child = codistill::test::run_command(
        "CUDA_VISIBLE_DEVICES= /proc/" + std::to_string(::getpid()) + "/exe '" + name + "'", dir);
    INFO(child.out << child.err);
    CHECK(child.exit_code == 0);
    CHECK(child.out.find("All tests passed") != std::string::npos);
    CHECK(child.out.find("skipped") == std::string::npos);
    return;
  }
  CHECK_THROWS_AS(make_process_group(o), ProcessGroupError);
  CHECK_THROWS_WITH(make_process_group(o), Catch::Contains("no CUDA device is visible to this process") &&
                                               Catch::Contains("group.kind mpi"));
}

TEST_CASE("host-memory groups refuse the device all-reduce", "[dist]") {
  auto g = make_process_group(single_options());
  CHECK_FALSE(g->reduces_device_memory());
  CHECK(g->device().empty());
  std::vector<float> data(4, 1.0f);
  std::vector<std::span<float>> buckets = {data};
  CHECK_THROWS_AS(g->start_device_all_reduce_sum(buckets, nullptr), ProcessGroupError);
  CHECK_THROWS_WITH(g->start_device_all_reduce_sum(buckets, nullptr),
                    Catch::Contains("reduces host memory only") && Catch::Contains("kind single"));
  CHECK(data == std::vector<float>(4, 1.0f));
}
