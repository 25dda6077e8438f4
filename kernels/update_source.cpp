// Backend::sgd_update / adamw_update's out-of-place source, checked once for every backend.
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

namespace codistill::kernels {

namespace {

void check_member(const Tensor* from, const Tensor* written, const char* member, const char* op) {
  if (!from) return;
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(std::string(op) + ": the update's source " + member + " " + why);
  };
  if (!written) fail("is set but the update writes no " + std::string(member));
  if (from->numel() != written->numel())
    fail("has " + std::to_string(from->numel()) + " elements, the updated tensor " +
         std::to_string(written->numel()));
  if (from->numel() == 0) return;  // nothing to read
  if (from->dtype() != written->dtype() || from->device() != written->device())
    fail("is not of the updated tensor's dtype and device");
  // Reading and writing the same memory is the in-place update: the caller passes null.
  if (from->same_memory(*written)) fail("is the updated tensor itself (pass none for an update in place)");
}

}  // namespace

void check_update_source(const UpdateSource& from, const Tensor& value, const Tensor* m, const Tensor* v,
                         const char* op) {
  check_member(from.value, &value, "value", op);
  check_member(from.m, m, "m", op);
  check_member(from.v, v, "v", op);
}

}  // namespace codistill::kernels
