#pragma once
// What a layer that computes across the ranks of a worker group needs from the group: an
// in-place element-wise sum over the ranks, of host memory. The trainer (train/group.cpp)
// adapts its process group (codistill/dist) to it; nn itself does not depend on dist. Used by BatchNorm with
// group.sync_batchnorm.
#include <span>

namespace codistill {

class GroupSum {
 public:
  virtual ~GroupSum() = default;
  // Every rank calls it with a span of the same length, in the same order of calls.
  virtual void all_reduce_sum(std::span<double> values) = 0;
};

}  // namespace codistill
