#pragma once
// Each worker's own data (docs/data.md, "Each worker's data"): any data path may name the
// worker, `{worker}` (run.worker) and `{rank}` (the rank within its worker group), so that
// `data.path: /local/shard-{worker}` gives every worker its own files. Such a worker's data
// is split no further: data.shard auto becomes none (all of it, in the worker's own order).
#include "codistill/data/data_options.hpp"

namespace codistill::data {

// Whether any path of `d` names the worker or the rank.
bool names_worker(const DataConfig& d);

// `d` with {worker} and {rank} replaced in every path (data.path, the four IDX file names,
// data.train, data.valid) and data.shard auto resolved: none where a path named the worker
// or rank, else disjoint. Throws std::invalid_argument naming the key for any other
// {placeholder}.
DataConfig for_worker(const DataConfig& d, int worker, int rank);

}  // namespace codistill::data
