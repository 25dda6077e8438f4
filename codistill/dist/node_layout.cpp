#include "codistill/dist/node_layout.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>

namespace codistill::dist {

namespace {

// One rank's record on the wire: its pid, then its node key (cut to fit, zero-padded).
constexpr std::size_t kKeyBytes = 248;
struct Record {
  std::int64_t pid = 0;
  char key[kKeyBytes] = {};
};

}  // namespace

std::string node_key() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "unknown-host");
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return std::string(host) + "/" + boot;
}

NodeLayout node_layout(ProcessGroup& group) {
  NodeLayout out;
  out.node = node_key();
  out.leader = group.rank();
  out.leader_pid = static_cast<long>(::getpid());
  if (group.size() == 1) return out;
  Record mine;
  mine.pid = ::getpid();
  std::strncpy(mine.key, out.node.c_str(), kKeyBytes - 1);
  out.ranks_here = 0;
  // Every rank sends its record in turn: small groups (a node's handful of ranks, a few
  // nodes), so size() broadcasts of 256 bytes cost nothing beside a teacher's load.
  for (int r = 0; r < group.size(); ++r) {
    Record rec = mine;
    group.broadcast(std::as_writable_bytes(std::span<Record>(&rec, 1)), r);
    if (std::strncmp(rec.key, mine.key, kKeyBytes) != 0) continue;
    if (out.ranks_here++ == 0) {  // ranks come in order: the first one here leads
      out.leader = r;
      out.leader_pid = static_cast<long>(rec.pid);
    }
  }
  return out;
}

}  // namespace codistill::dist
