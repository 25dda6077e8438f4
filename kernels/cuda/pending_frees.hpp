#pragma once
// The bookkeeping that makes the caching allocator's reuse stream-safe, CUDA-free so the
// tests run it on the CPU: a freed block is not reusable at once, because kernels queued on
// any of the device's streams may still read or write it. At the free, a marker (a CUDA
// event) is recorded on every live stream of the device; the block becomes reusable once
// all its markers have completed (PyTorch's record_stream idea, applied to every stream
// since the freeing code cannot know which streams used the block).
#include <cstddef>
#include <utility>
#include <vector>

namespace codistill::kernels::cuda {

template <class Marker>
class PendingFrees {
 public:
  void add(void* block, std::vector<Marker> markers) {
    entries_.push_back({block, std::move(markers)});
  }

  // The blocks all of whose markers are done (done(marker) -> bool, which may also wait), in
  // the order they were freed; their markers go to recycle(marker).
  template <class Done, class Recycle>
  std::vector<void*> collect(Done&& done, Recycle&& recycle) {
    std::vector<void*> ready;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      bool all = true;
      for (const Marker& m : e.markers) all = all && done(m);
      if (all) {
        for (const Marker& m : e.markers) recycle(m);
        ready.push_back(e.block);
      } else {
        if (kept != i) entries_[kept] = std::move(e);  // never a self-move: it would empty e
        ++kept;
      }
    }
    entries_.resize(kept);
    return ready;
  }

  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    void* block;
    std::vector<Marker> markers;
  };
  std::vector<Entry> entries_;
};

}  // namespace codistill::kernels::cuda
