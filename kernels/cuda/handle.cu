// The event helpers of handle.cuh, shared by the backend's events (backend.cu) and the
// pre-backend API's (context.cu).
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/handle.cuh"

namespace codistill::kernels::cuda {

EventHandle make_timing_free_event() {
  EventHandle event;
  CODISTILL_CUDA_CHECK(cudaEventCreateWithFlags(event.put(), cudaEventDisableTiming));
  return event;
}

bool event_reached(cudaEvent_t e) {
  const cudaError_t err = cudaEventQuery(e);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer, not an error: leave none behind
    return false;
  }
  throw_cuda_error(err, "cudaEventQuery(event)", __FILE__, __LINE__);
}

}  // namespace codistill::kernels::cuda
