// Loads NCCL (nccl_api.hpp) with dlopen/dlsym.
#include "codistill/dist/nccl_api.hpp"

#include <dlfcn.h>

#include <type_traits>

#include "codistill/dist/process_group.hpp"

namespace codistill::dist {

const NcclApi& nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    // The soname through the loader's path, then the library CMake found.
    void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = ::dlopen(CODISTILL_NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      a.error = std::string("NCCL cannot be loaded (libnccl.so.2, or ") + CODISTILL_NCCL_LIBRARY +
                " as configured): " + (why ? why : "?") + " - install NCCL or add its folder to LD_LIBRARY_PATH";
      return a;
    }
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (fn == nullptr && a.error.empty())
        a.error = std::string("the NCCL library has no ") + name + " (NCCL 2.14 or newer is needed)";
    };
    load(a.get_unique_id, "ncclGetUniqueId");
    load(a.comm_init_rank_config, "ncclCommInitRankConfig");
    load(a.comm_get_async_error, "ncclCommGetAsyncError");
    load(a.comm_finalize, "ncclCommFinalize");
    load(a.comm_destroy, "ncclCommDestroy");
    load(a.comm_abort, "ncclCommAbort");
    load(a.get_error_string, "ncclGetErrorString");
    load(a.get_last_error, "ncclGetLastError");
    load(a.group_start, "ncclGroupStart");
    load(a.group_end, "ncclGroupEnd");
    load(a.all_reduce, "ncclAllReduce");
    return a;  // the library stays open for the process's life
  }();
  if (!api.error.empty()) throw ProcessGroupError("nccl process group: " + api.error);
  return api;
}


}  // namespace codistill::dist
