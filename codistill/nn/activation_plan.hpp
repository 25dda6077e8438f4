#pragma once
// Helpers for Module::plan_activations: element counts of full shapes (batch first) and the
// bytes of float32 and int32 buffers, so each module's plan reads like its ensure() calls.
#include <cstdint>

#include "codistill/nn/module.hpp"

namespace codistill::nn {

// Training runs in float32; int32 buffers are ids and arg-max indices.
inline constexpr std::int64_t kActivationBytes = 4;

inline std::int64_t f32_bytes(std::int64_t numel) { return numel * kActivationBytes; }
inline std::int64_t f32_bytes(const kernels::Shape& s) { return f32_bytes(kernels::shape_numel(s)); }

// output_shape (per example) with the batch dimension of x put back.
kernels::Shape batched_output(const Module& m, const kernels::Shape& x);

}  // namespace codistill::nn
