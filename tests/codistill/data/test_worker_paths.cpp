// {worker} and {rank} in data paths: every path field is resolved, data.shard auto becomes
// none only where a path names the worker or rank, and an unknown placeholder names its key.
#include <stdexcept>

#include "codistill/data/sampler.hpp"
#include "codistill/data/worker_paths.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::data;

TEST_CASE("data paths name the worker and the rank", "[data][worker_paths]") {
  DataConfig d;
  d.kind = "tokens";
  d.path = "/local/node-{worker}/r{rank}";
  d.train = "train_{worker}_*.bin";
  d.valid = "valid_*.bin";
  d.train_images = "{worker}-{worker}.gz";
  CHECK(names_worker(d));
  const DataConfig w = for_worker(d, 3, 1);
  CHECK(w.path == "/local/node-3/r1");
  CHECK(w.train == "train_3_*.bin");
  CHECK(w.valid == "valid_*.bin");
  CHECK(w.train_images == "3-3.gz");
  CHECK(w.shard == "none");
  CHECK(parse_shard_mode(w.shard) == ShardMode::none);

  DataConfig global;  // no placeholder: one dataset split across the workers
  CHECK_FALSE(names_worker(global));
  CHECK(for_worker(global, 2, 0).shard == "disjoint");
  CHECK(for_worker(global, 2, 0).path == global.path);
  d.shard = "disjoint";  // said explicitly: kept, even for a worker's own files
  CHECK(for_worker(d, 0, 0).shard == "disjoint");
}

TEST_CASE("an unknown placeholder is an error naming the key, other braces stay", "[data][worker_paths]") {
  DataConfig d;
  d.path = "/data/{node}";
  CHECK_THROWS_WITH(for_worker(d, 0, 0), Catch::Contains("data.path: unknown placeholder {node}") &&
                                             Catch::Contains("valid: {worker}, {rank}"));
  d.path = "/data";
  d.valid = "v_{wroker}.bin";
  CHECK_THROWS_WITH(for_worker(d, 0, 0), Catch::Contains("data.valid: unknown placeholder {wroker}"));
  d.valid = "v_{0.bin";  // an opening brace without a closing one is literal
  CHECK(for_worker(d, 0, 0).valid == "v_{0.bin");
}
