#pragma once
// The oneDNN state a CPU queue keeps per primitive family (DnnlConv, DnnlMatmul), so that
// each family holds it the same way: the engine and stream its primitives run on, the lock
// its calls take turns under (the shared default CPU queue can be reached from any thread),
// and its primitives per key, made on first use (making one costs far more than running
// it) and kept for the queue's life. A key holds the thread count (omp_get_max_threads):
// oneDNN partitions the work for the threads it sees when a primitive is made.
// Internal to kernels/cpu/ (.cpp files only): it carries oneDNN types.
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

namespace codistill::kernels::cpu {

struct DnnlContext {
  DnnlContext();
  std::mutex mu;
  dnnl::engine engine;
  dnnl::stream stream;
  // Our buffer as oneDNN memory of layout d, without a copy.
  dnnl::memory wrap(const dnnl::memory::desc& d, const void* p) const;
};

template <class Key, class Entry>
class DnnlCache {
 public:
  // The entry for key, made by build() on first use; the caller holds the context's lock.
  template <class Build>
  Entry& get(const Key& key, Build&& build) {
    auto it = entries_.find(key);
    if (it == entries_.end()) it = entries_.emplace(key, build()).first;
    return it->second;
  }

 private:
  std::map<Key, Entry> entries_;
};

}  // namespace codistill::kernels::cpu
