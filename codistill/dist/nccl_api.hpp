#pragma once
// NCCL's entry points, opened at run time: private to the nccl group (nccl_group.cpp, the
// only includer; compiled only with CODISTILL_HAVE_NCCL), not a public header of dist.
#include <nccl.h>

#include <string>

namespace codistill::dist {

// NCCL is opened at run time, not linked: libnccl is a ~200 MB library that a CUDA machine
// may not have, and every binary links this group. So codistill-train starts (and the
// bundle stays small) where NCCL is absent; only making an nccl group then fails, saying
// so. The header still gives every signature (decltype), so a mismatch fails to compile.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclCommFinalize) comm_finalize = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetLastError) get_last_error = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  std::string error;  // why it could not be loaded; empty when every pointer is set
};

// The entry points, loaded on first use; throws ProcessGroupError saying why when the
// library or one of them is missing.
const NcclApi& nccl();

}  // namespace codistill::dist
