// The oneDNN state shared by the CPU queue's primitive families (dnnl_context.hpp).
#include "kernels/cpu/dnnl_context.hpp"

namespace codistill::kernels::cpu {

// The CPU engine 0: the primitives run on the caller's OpenMP threads.
DnnlContext::DnnlContext() : engine(dnnl::engine::kind::cpu, 0), stream(engine) {}

dnnl::memory DnnlContext::wrap(const dnnl::memory::desc& d, const void* p) const {
  // oneDNN takes a non-const handle for inputs too; it only reads them.
  return dnnl::memory(d, engine, const_cast<void*>(p));
}

}  // namespace codistill::kernels::cpu
