#pragma once
// One owner for every library handle of the CUDA backend (streams, events, cuBLAS and cuDNN
// handles, cuDNN descriptors; the aliases are in handle.cuh): a move-only holder of an opaque
// handle that calls the library's destroy function once, so that no class repeats a
// create/destroy pair or the try/catch that frees a half-configured handle. CUDA-free, so
// the tests check it on the CPU with a fabricated destroy function.
//
// Destroy errors are ignored: a destructor cannot report them, and at process exit the
// runtime may already be gone. An owner that must not call the library at all then
// (StreamResources, when cudaSetDevice fails) gives its handles up with release().
#include <utility>

namespace codistill::kernels::cuda {

// H: the library's handle type (a pointer); Destroy: its destroy function, H -> status.
template <class H, auto Destroy>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(H h) noexcept : h_(h) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(UniqueHandle&& o) noexcept : h_(o.release()) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  H get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != nullptr; }
  // Destroys the handle held (if any) and holds h.
  void reset(H h = nullptr) noexcept {
    if (h_) (void)Destroy(h_);
    h_ = h;
  }
  // Gives the handle up without destroying it.
  H release() noexcept { return std::exchange(h_, nullptr); }
  // For a create call's out parameter (cudnnCreate(h.put())): destroys the handle held,
  // then lets the library write the new one in place.
  H* put() noexcept {
    reset();
    return &h_;
  }

 private:
  H h_ = nullptr;
};

}  // namespace codistill::kernels::cuda
