#pragma once
// Kind "single": the one process of a worker that is not a group. Rank 0 of 1; every
// collective is the identity (the sum over one rank is the data itself).
#include <memory>

#include "codistill/dist/process_group.hpp"

namespace codistill::dist {

std::unique_ptr<ProcessGroup> make_single_group(const GroupOptions& options);

}  // namespace codistill::dist
