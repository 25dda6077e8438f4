#pragma once
// train.precision and codistill.teacher_precision as the kernels' Compute (kernels/ops.hpp):
// the student's queue computes its GEMMs as train.precision says; teachers' queues, and the
// teachers' logits inside the fused head, as codistill.teacher_precision says ("same": the
// student's). The config's schema has checked the spellings already.
#include "codistill/config/config.hpp"
#include "kernels/ops.hpp"

namespace codistill {

inline kernels::Compute student_compute(const Config& c) { return kernels::parse_compute(c.train.precision); }

inline kernels::Compute teacher_compute(const Config& c) {
  return c.codistill.teacher_precision == "same" ? student_compute(c)
                                                 : kernels::parse_compute(c.codistill.teacher_precision);
}

}  // namespace codistill
