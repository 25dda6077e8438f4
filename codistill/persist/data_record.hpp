#pragma once
// The run directory's record of each worker's data (RUN_DIR/worker-NNN/data.json, docs/data.md):
// the data kind, the resolved path (a path may name {worker}), the files and their
// fingerprint (data/feed/data_identity.hpp). Written when a worker starts; a resumed worker
// whose data has another fingerprint is refused, naming what changed.
#include <string>

#include "codistill/data/feed/data_identity.hpp"

namespace codistill {

// Publishes worker_dir/data.json atomically (replacing an older one).
void record_data(const std::string& worker_dir, const DataIdentity& id);

// Throws RunDirError (run_dir.hpp) when worker_dir/data.json records other data than `id`;
// nothing when there is no record (a run from before it existed) or it matches.
void check_recorded_data(const std::string& worker_dir, const DataIdentity& id);

}  // namespace codistill
