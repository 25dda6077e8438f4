#pragma once
// The file operations under WorkerOwner (worker_owner.hpp), each safe against other
// processes on other clients of a network file system acting on the same names at once.
// INTERNAL to codistill/persist/worker_owner*.cpp and their tests.
//
// What a network file system changes here (measured on GlusterFS, docs/training.md
// "Network file systems"): a name a client has cached can point at a file another client
// has since removed or replaced (opening it then fails with ESTALE, or, for up to the
// entry timeout, opens the old file), and renameat2(RENAME_NOREPLACE) is refused (EINVAL).
// link(2) stays exclusive and rename(2) atomic, so claims are made with link and stale
// files removed by renaming them aside first, then checking what was moved.
#include <sys/types.h>

#include <string>

namespace codistill::owner_files {

// What one open of a file showed: inode, age of its modification time (the heartbeat) and
// bytes, all through one descriptor, so that they belong to one file.
struct Seen {
  bool found = false;  // false: the name is gone (ENOENT, or ESTALE: removed through another client)
  ino_t ino = 0;
  double age_s = 0;
  std::string text;
};

// Opens path and reads it; found == false when it is gone; throws RunDirError on other errors.
Seen look(const std::string& path);

// Creates path holding text, exclusively: false when the name is taken. The text goes to a
// private draft `<path>.<host>.<pid>.claim` first, fsynced, then hard-linked to path, so
// path is never seen empty or torn, even after kill -9. *ino receives the new file's inode.
bool create_exclusive(const std::string& path, const std::string& text, const std::string& host, ino_t* ino);

// Removes path only if it is still the file `judged` was (same inode and bytes) and returns
// true; false when it was gone already or is another file now (which is left in place).
// Unlinking by name after a read could remove a claim made in between (on a network file
// system the read can even come from a cached handle of the old file), so path is renamed
// aside (`<path>.<host>.<pid>.aside`, atomic and by name on the server) and the file moved
// is checked; one that is not the judged file goes back with link(2), which never replaces
// a claim made meanwhile.
bool remove_if_same(const std::string& path, const Seen& judged, const std::string& host);

// Removes the drafts and aside files that processes of this host which no longer run left
// beside path (`<path>.<host>.<pid>.claim|aside`, and the same for `<path>.takeover`).
void remove_dead_leftovers(const std::string& path, const std::string& host);

// The process pid runs and, where /proc says, started no later than started_unix (+2 s), so
// that a recycled pid of a later, unrelated process does not count. started_unix <= 0: any.
bool process_alive(long pid, long long started_unix);

}  // namespace codistill::owner_files
