// Backend::sgd_update / adamw_update's out-of-place source, checked once for every backend.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

namespace codistill::kernels {

namespace {

[[noreturn]] void fail(const char* op, const char* member, const std::string& why) {
  throw std::invalid_argument(std::string(op) + ": the update's source " + member + " " + why);
}

bool overlap(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.device() != b.device()) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.raw()), b0 = reinterpret_cast<std::uintptr_t>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

void check_member(const Tensor* from, const Tensor* written, const char* member, const char* op) {
  if (!from) return;
  if (!written) fail(op, member, "is set but the update writes no " + std::string(member));
  if (from->numel() != written->numel())
    fail(op, member,
         "has " + std::to_string(from->numel()) + " elements, the updated tensor " + std::to_string(written->numel()));
  if (from->dtype() != written->dtype() || from->device() != written->device())
    fail(op, member, "is not of the updated tensor's dtype and device");
}

}  // namespace

void check_update_source(const UpdateSource& from, const Tensor& value, const Tensor* m, const Tensor* v,
                         const char* op) {
  check_member(from.value, &value, "value", op);
  check_member(from.m, m, "m", op);
  check_member(from.v, v, "v", op);
  // Each element is read before it is written only at its own index: a source that shares
  // memory with any written tensor (the same, an offset view, another's block) would be
  // read after the update wrote it, and the streaming stores pass the caches besides.
  // In place is the caller passing no source.
  const Tensor* written[] = {&value, m, v};
  const std::pair<const Tensor*, const char*> sources[] = {{from.value, "value"}, {from.m, "m"}, {from.v, "v"}};
  for (const auto& [src, member] : sources)
    for (const Tensor* w : written)
      if (src && w && overlap(*src, *w))
        fail(op, member, "shares memory with a tensor the update writes (pass none for an update in place)");
}

}  // namespace codistill::kernels
