#pragma once
// POSIX file operations of the publish protocol. INTERNAL to checkpoint/*.cpp. Each
// throws std::system_error naming the operation and the path.
#include <string>

namespace codistill::checkpoint::fsutil {

void fsync_file(const std::string& path);
// fsync of a folder makes a rename in it durable. File systems that cannot fsync a
// folder (EINVAL) are accepted: there the rename is as durable as they make it.
void fsync_dir(const std::string& path);
// rename(2) that never replaces: renameat2(RENAME_NOREPLACE) where the file system has
// it; elsewhere (some NFS servers) link(2) + unlink(2), which is equally exclusive.
void rename_no_replace(const std::string& from, const std::string& to);
// Asks the kernel to start writing the file's dirty pages back now, without waiting
// (Linux sync_file_range; a no-op elsewhere). A writer calls it every few tens of MB so
// that the disk works while the CPU checksums the next chunks, and the final fsync only
// waits for the tail.
void start_writeback(int fd);
// An errno that means "this name is gone": ENOENT, or ESTALE, which a network file system
// (NFS, GlusterFS's FUSE client) returns when the file behind a name this client had
// cached was removed or replaced through another client. Peers' files come and go under
// retention, so both read as "vanished", never as a failure of the file system.
bool gone_errno(int err);
// Why path has vanished ("no such file", or the same with the stale handle named), or ""
// when stat(2) finds it or fails for another reason (permissions, I/O: not vanished).
std::string vanished_reason(const std::string& path);
// unlink(2), ignoring a file that is already gone (gone_errno); returns whether this call removed it.
bool remove_if_exists(const std::string& path);
// kill(pid, 0) != ESRCH: a pid that exists (on this host) counts as alive.
bool pid_alive(long pid);
long this_pid();

}  // namespace codistill::checkpoint::fsutil
