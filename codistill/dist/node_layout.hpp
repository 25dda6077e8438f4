#pragma once
// Which ranks of a process group share this rank's node: what node-local sharing needs
// (teachers read from one shared-memory file per node, codistill/teachers/teacher_sharing.hpp).
// Built from the group's own collectives (one broadcast per rank), so it works for every
// kind and keeps MPI out of this header.
#include <string>

#include "codistill/dist/process_group.hpp"

namespace codistill::dist {

struct NodeLayout {
  std::string node;    // this node's key: host name and boot id
  int leader = 0;      // the lowest rank on this node
  long leader_pid = 0; // its process id
  int ranks_here = 1;  // the group's ranks on this node, this one included
};

// This machine's key: the host name, and the kernel's boot id where there is one (two
// containers named alike on different machines differ there).
std::string node_key();

// A collective: every rank of `group` calls it. One process (size 1): this process alone.
NodeLayout node_layout(ProcessGroup& group);

}  // namespace codistill::dist
