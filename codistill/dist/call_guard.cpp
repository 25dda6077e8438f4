#include "codistill/dist/call_guard.hpp"

#include <utility>

#include "codistill/dist/process_group.hpp"

namespace codistill::dist {

CallGate::CallGate(std::function<std::string()> who, std::string overlap_rule)
    : who_(std::move(who)), overlap_rule_(std::move(overlap_rule)) {}

CallGuard::CallGuard(CallGate& gate, const char* what) : gate_(gate) {
  if (!gate.broken_.empty())
    throw ProcessGroupError(gate.who_() + ": " + what + " on a group that an earlier error made unusable (" +
                            gate.broken_ + "); the process must exit");
  // Set only by the thread that finds it clear: a refused call leaves it to the one inside.
  if (gate.inside_.exchange(true))
    throw ProcessGroupError(gate.who_() + ": " + what + " while another thread is inside the group: " +
                            gate.overlap_rule_);
}

}  // namespace codistill::dist
