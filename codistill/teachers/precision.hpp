#pragma once
// train.precision and codistill.teacher_precision as the kernels' Compute (kernels/ops.hpp):
// the student's queue computes its GEMMs as train.precision says; teachers' queues, and the
// teachers' logits inside the fused head, as codistill.teacher_precision says ("same": the
// student's). The config's schema has checked the spellings already.
#include <string>

#include "codistill/config/config.hpp"
#include "codistill/util/config_error.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops.hpp"

namespace codistill {

inline kernels::Compute student_compute(const Config& c) { return kernels::parse_compute(c.train.precision); }

inline kernels::Compute teacher_compute(const Config& c) {
  return c.codistill.teacher_precision == "same" ? student_compute(c)
                                                 : kernels::parse_compute(c.codistill.teacher_precision);
}

// codistill.teacher_weights: bf16 holds a teacher's matrices as bf16 (ParamArena::
// to_bf16_matrices), which its products then read as they are: they must be bf16 products
// (codistill.teacher_precision: bf16, or same with train.precision: bf16), on a backend with
// the bf16-weight ops (the CPU's and CUDA's; a backend without them, such as the CUDA stub
// of a build without CUDA, is refused). A ConfigError naming the key otherwise, before the
// run directory is touched (exit 2).
inline void check_teacher_weights(const Config& c, const kernels::Backend& backend) {
  if (c.codistill.teacher_weights != "bf16") return;
  if (teacher_compute(c) != kernels::Compute::bf16)
    throw ConfigError("codistill.teacher_weights", "", 0,
                      "bf16 weights are multiplied as they are, in bf16: set codistill.teacher_precision: bf16 "
                      "(teacher products are " + std::string(kernels::compute_name(teacher_compute(c))) + ")");
  if (!backend.supports(kernels::Op::linear_bf16_weights, kernels::DType::f32) ||
      !backend.supports(kernels::Op::embedding_bf16_table, kernels::DType::f32) ||
      !backend.supports(kernels::Op::linear_distill_head_bf16_teachers, kernels::DType::f32))
    throw ConfigError("codistill.teacher_weights", "", 0,
                      "bf16: the " + std::string(backend.name()) +
                          " backend has no bf16-weight kernels (linear, embedding, fused head) yet; use float32");
}

}  // namespace codistill
