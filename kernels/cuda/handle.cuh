#pragma once
// The library handles the CUDA backend owns, each a UniqueHandle (unique_handle.hpp) over
// its type and destroy function, and the event helpers its two event classes share
// (backend.cu's CudaEvent, context.cu's Event). Internal to kernels/cuda/ (.cu files only).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/cuda/unique_handle.hpp"

namespace codistill::kernels::cuda {

using StreamHandle = UniqueHandle<cudaStream_t, cudaStreamDestroy>;
using EventHandle = UniqueHandle<cudaEvent_t, cudaEventDestroy>;
using CublasHandle = UniqueHandle<cublasHandle_t, cublasDestroy>;
using CudnnHandle = UniqueHandle<cudnnHandle_t, cudnnDestroy>;
using CudnnTensorDesc = UniqueHandle<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using CudnnFilterDesc = UniqueHandle<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using CudnnConvDesc = UniqueHandle<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

// A timing-free event (cheaper to record and to wait on than a timing one) on the current
// device. Throws std::runtime_error with file, line and CUDA's message.
EventHandle make_timing_free_event();

// cudaEventQuery as an answer: true when reached, false when not yet ("not ready" is cleared
// so that no error is left behind for the thread's next call); any other status throws.
bool event_reached(cudaEvent_t e);

}  // namespace codistill::kernels::cuda
