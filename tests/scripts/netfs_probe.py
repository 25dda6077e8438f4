#!/usr/bin/python3
"""Probes the file-system semantics codistill's run directory relies on, between two clients.

    /usr/bin/python3 tests/scripts/netfs_probe.py DIR_A DIR_B [--rounds N] [--timeout S]

DIR_A and DIR_B are the same folder seen through two mounts of one network volume (what two
nodes see; scripts/netfs.sh mount twice), or twice the same path for a local baseline. Client
A and client B are two processes, each working only through its own mount. Prints one line
per finding ("name: result"); nothing is judged, the numbers are the record. A manual probe,
not a CTest test (not named test_*.py). Needs root for the permission probe (it runs a reader
as nobody, as the chaos test does).

What it probes (the operations of checkpoint/fsutil.cpp, checkpoint/store.cpp,
codistill/persist/worker_owner.cpp and run_dir.cpp):
  negative    B looks a name up before A publishes it (sync mode's wait): seen, and if not,
              does a listing of the folder make it appear
  publish     write temp, fsync (or not), put it into place on A (rename; renameat2 NOREPLACE;
              link + unlink; codistill's NOREPLACE-else-link); B polls the final name and
              reads it whole: lag until visible, and whether what it read was ever incomplete
  rename      rename over an existing file on A while B reads the name in a loop: ENOENT gaps,
              torn or stale contents, ESTALE
  renameat2   RENAME_NOREPLACE supported? EEXIST when the target exists?
  link/excl   link() and O_CREAT|O_EXCL supported; A and B racing for one name: one winner?
  mtime       st_mtime_ns resolution; utime(None) (touch, the heartbeat) and an explicit
              utime on A: how long until B's stat shows it
  readdir     a new file on A: how long until B's listdir shows it; an unlinked one: how long
              B still lists it, and what opening it then gives
  unlink      A unlinks a file B has open (retention vs a reading peer): can B read on?
  fsync dir   fsync of a folder's fd
  locks       flock and fcntl(F_SETLK) held on A: does B's attempt fail?
  perms       chmod 000 of a folder on A: how long until a non-root reader on B gets EACCES
  misc        sync_file_range, statfs type
"""
import ctypes
import errno
import hashlib
import multiprocessing as mp
import os
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
SYNC_FILE_RANGE_WRITE = 2


def renameat2_noreplace(src, dst):
    r = libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE)
    return 0 if r == 0 else ctypes.get_errno()


def ename(e):
    return errno.errorcode.get(e, str(e)) if e else "ok"


def payload(seq, size):
    head = f"seq={seq:08d} size={size:012d}\n".encode()
    block = hashlib.sha256(head).digest() * (size // 32 + 1)
    return (head + block)[:size]


def check_payload(data):
    try:
        head = data[: data.index(b"\n")].decode()  # "seq=N size=M"
        seq, size = (int(f.split("=")[1]) for f in head.split())
    except (ValueError, IndexError, UnicodeDecodeError):
        return None, "unparsable head"
    if len(data) != size:
        return seq, f"short: {len(data)} of {size} bytes"
    if data != payload(seq, size):
        return seq, "content differs"
    return seq, ""


# ---------------------------------------------------------------- the client processes


def client(base, conn):
    """Runs commands (name, args) sent by the parent against this client's mount."""
    while True:
        msg = conn.recv()
        if msg is None:
            return
        name, args = msg
        try:
            conn.send(("ok", globals()["op_" + name](base, *args)))
        except Exception as e:  # noqa: BLE001 - reported, not raised
            conn.send(("error", f"{type(e).__name__}: {e}"))


def op_mkdir(base, rel):
    os.makedirs(os.path.join(base, rel), exist_ok=True)
    return True


def op_publish(base, rel, seq, size, fsync, how):
    """Writes a temp file and renames it to rel (how: rename | noreplace | link)."""
    final = os.path.join(base, rel)
    tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    data = payload(seq, size)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[: 1 << 20]):]
    if fsync:
        os.fsync(fd)
    os.close(fd)
    t = time.time()
    if how == "rename":
        os.rename(tmp, final)
    elif how == "noreplace":
        e = renameat2_noreplace(tmp, final)
        if e:
            raise OSError(e, os.strerror(e))
    elif how == "codistill":  # checkpoint/fsutil.cpp rename_no_replace: NOREPLACE, else link + unlink
        e = renameat2_noreplace(tmp, final)
        if e in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            os.link(tmp, final)
            os.unlink(tmp)
        elif e:
            raise OSError(e, os.strerror(e))
    else:
        os.link(tmp, final)
        os.unlink(tmp)
    return t


def op_poll_open_read(base, rel, timeout, interval=0.0005):
    """Polls open(rel) until it succeeds; reads it whole. Returns (time seen, seq, problem, errors)."""
    path = os.path.join(base, rel)
    errors = {}
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(path, "rb") as f:
                t = time.time()
                data = f.read()
            seq, why = check_payload(data)
            return t, seq, why, errors
        except OSError as e:
            errors[ename(e.errno)] = errors.get(ename(e.errno), 0) + 1
            time.sleep(interval)
    return None, None, "never appeared", errors


def op_poll_listdir(base, rel_dir, name, present, timeout):
    """Polls listdir until name is (present) or is not (not present) listed; returns when."""
    d = os.path.join(base, rel_dir)
    end = time.time() + timeout
    while time.time() < end:
        if (name in os.listdir(d)) == present:
            return time.time()
        time.sleep(0.001)
    return None


def op_reader_loop(base, rel, seconds):
    """Reads rel over and over; counts what it saw."""
    path = os.path.join(base, rel)
    seen = {"reads": 0, "ok": 0, "backwards": 0}
    last = -1
    end = time.time() + seconds
    while time.time() < end:
        seen["reads"] += 1
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            k = "open/read " + ename(e.errno)
            seen[k] = seen.get(k, 0) + 1
            continue
        seq, why = check_payload(data)
        if why:
            seen["torn: " + why.split(":")[0]] = seen.get("torn: " + why.split(":")[0], 0) + 1
            continue
        seen["ok"] += 1
        if seq < last:
            seen["backwards"] += 1
        last = max(last, seq)
    seen["last seq"] = last
    return seen


def op_writer_loop(base, rel, seconds, size):
    """Renames new versions over rel for `seconds`; returns how many."""
    end = time.time() + seconds
    seq = 0
    while time.time() < end:
        seq += 1
        op_publish(base, rel, seq, size, True, "rename")
    return seq


def op_touch(base, rel, times):
    p = os.path.join(base, rel)
    os.utime(p, times)  # None: now (what the heartbeat's utimensat(nullptr) does)
    st = os.stat(p)
    return st.st_mtime_ns


def op_create(base, rel, text):
    with open(os.path.join(base, rel), "w") as f:
        f.write(text)
    return True


def op_append(base, rel, text):
    with open(os.path.join(base, rel), "a") as f:
        f.write(text)
        f.flush()
    return True


def op_unlink(base, rel):
    t = time.time()
    os.unlink(os.path.join(base, rel))
    return t


def op_stat(base, rel):
    st = os.stat(os.path.join(base, rel))
    return {"mtime_ns": st.st_mtime_ns, "size": st.st_size, "ino": st.st_ino, "mode": oct(st.st_mode & 0o7777)}


def op_poll_mtime(base, rel, target_ns, timeout):
    """Polls stat until st_mtime_ns >= target_ns; returns when, and the last value seen."""
    p = os.path.join(base, rel)
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = os.stat(p).st_mtime_ns
        if last >= target_ns:
            return time.time(), last
        time.sleep(0.002)
    return None, last


def op_poll_size(base, rel, size, timeout):
    p = os.path.join(base, rel)
    end = time.time() + timeout
    while time.time() < end:
        if os.stat(p).st_size >= size:
            return time.time()
        time.sleep(0.002)
    return None


def op_race_link(base, rel, token, start_at):
    """Drafts token and link()s it to rel at start_at (as worker_owner.cpp's create_exclusive)."""
    final = os.path.join(base, rel)
    draft = f"{final}.{token}.claim"
    with open(draft, "w") as f:
        f.write(token)
        f.flush()
        os.fsync(f.fileno())
    while time.time() < start_at:
        pass
    try:
        os.link(draft, final)
        won = "won"
    except OSError as e:
        won = ename(e.errno)
    os.unlink(draft)
    return won


def op_race_excl(base, rel, token, start_at):
    final = os.path.join(base, rel)
    while time.time() < start_at:
        pass
    try:
        fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, token.encode())
        os.close(fd)
        return "won"
    except OSError as e:
        return ename(e.errno)


def op_race_noreplace(base, rel, token, start_at):
    final = os.path.join(base, rel)
    tmp = f"{final}.{token}.tmp"
    with open(tmp, "w") as f:
        f.write(token)
    while time.time() < start_at:
        pass
    e = renameat2_noreplace(tmp, final)
    if e:
        os.unlink(tmp)
    return "won" if e == 0 else ename(e)


def op_negative_then_seen(base, rel_dir, name, poll_s):
    """Stats rel_dir/name every 20 ms for poll_s (the parent publishes it meanwhile); if it is
    still not found, says what makes it appear: stat again, then a listing, then stat."""
    path = os.path.join(base, rel_dir, name)
    end = time.time() + poll_s
    while time.time() < end:
        if os.path.exists(path):
            return "seen while polling"
        time.sleep(0.02)
    if os.path.exists(path):
        return "seen just after"
    listed = name in os.listdir(os.path.join(base, rel_dir))
    return f"not seen for {poll_s:g} s; listed by readdir: {listed}; stat after the listing: " + (
        "found" if os.path.exists(path) else "ENOENT")


def op_read_text(base, rel):
    try:
        with open(os.path.join(base, rel)) as f:
            return f.read()
    except OSError as e:
        return "error " + ename(e.errno)


def op_open_hold(base, rel):
    global held
    held = open(os.path.join(base, rel), "rb")
    held.read(4096)
    return True


def op_read_held(base):
    try:
        held.seek(0)
        data = held.read()
        return check_payload(data)[1] or "read whole and intact"
    except OSError as e:
        return "error " + ename(e.errno)
    finally:
        try:
            held.close()
        except OSError:
            pass


def op_lock(base, rel, kind):
    """Takes an exclusive lock (kind flock | fcntl) without blocking; keeps it held."""
    import fcntl

    global lock_fd
    try:
        lock_fd = os.open(os.path.join(base, rel), os.O_RDWR | os.O_CREAT, 0o644)
        if kind == "flock":
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            fcntl.lockf(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return "locked"
    except OSError as e:
        return ename(e.errno)


def op_unlock(base):
    os.close(lock_fd)
    return True


def op_fsync_dir(base, rel):
    fd = os.open(os.path.join(base, rel), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
        return "ok"
    except OSError as e:
        return ename(e.errno)
    finally:
        os.close(fd)


def op_sync_file_range(base, rel):
    fd = os.open(os.path.join(base, rel), os.O_RDWR)
    try:
        r = libc.sync_file_range(fd, ctypes.c_int64(0), ctypes.c_int64(0), SYNC_FILE_RANGE_WRITE)
        return "ok" if r == 0 else ename(ctypes.get_errno())
    finally:
        os.close(fd)


def op_chmod(base, rel, mode):
    os.chmod(os.path.join(base, rel), mode)
    return time.time()


def op_poll_list_as_nobody(base, rel, want_error, timeout):
    """In a child running as nobody: polls listdir(rel) until it fails (want_error) or works."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        end = time.time() + timeout
        out = "timeout"
        while time.time() < end:
            try:
                os.listdir(os.path.join(base, rel))
                failed = None
            except OSError as e:
                failed = ename(e.errno)
            if bool(failed) == want_error:
                out = f"{time.time()!r} {failed}"
                break
            time.sleep(0.002)
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 200).decode()
    os.close(r)
    os.waitpid(pid, 0)
    if out == "timeout":
        return None, None
    t, e = out.split()
    return float(t), e


def op_statfs(base):
    st = os.statvfs(base)
    with open("/proc/mounts") as f:
        mounts = [line.split() for line in f]
    best = max((m for m in mounts if base == m[1] or base.startswith(m[1].rstrip("/") + "/")), key=lambda m: len(m[1]))
    return {"fs": best[2], "source": best[0], "options": best[3], "f_namemax": st.f_namemax}


# ---------------------------------------------------------------- the parent


class Client:
    def __init__(self, name, base):
        self.name = name
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(target=client, args=(base, child), daemon=True)
        self.proc.start()

    def send(self, name, *args):
        self.conn.send((name, args))

    def result(self):
        status, value = self.conn.recv()
        if status == "error":
            return "ERROR " + value
        return value

    def call(self, name, *args):
        self.send(name, *args)
        return self.result()

    def close(self):
        self.conn.send(None)
        self.proc.join()


def pct(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return "none"
    q = lambda p: values[min(len(values) - 1, int(p * len(values)))]  # noqa: E731
    return f"min {values[0] * 1e3:.1f} ms, median {q(0.5) * 1e3:.1f} ms, p90 {q(0.9) * 1e3:.1f} ms, max {values[-1] * 1e3:.1f} ms (n={len(values)})"


def say(key, value):
    print(f"{key}: {value}", flush=True)


# Each probe takes the two clients (A publishes, B observes), the probe's folder relative to
# both mounts, A's mount path, the number of rounds and how long B waits for a file; they run
# in this order, each on names of its own under run.
def probe_publish(a, b, run, dir_a, rounds, timeout):
    # publish: temp + (fsync) + rename on A; B polls the final name with open() and reads it.
    # B polls every 0.5 ms, and in the last variant every 20 ms as codistill.mode sync's
    # TeacherPool::load_exact does.
    variants = [(f, h, 0.0005) for f in (True, False) for h in ("rename", "noreplace", "link", "codistill")]
    for fsync, how, interval in variants + [(True, "codistill", 0.02)]:
        lags, problems, errors, failed = [], {}, {}, ""
        for i in range(rounds):
            rel = f"{run}/pub-{how}-{int(fsync)}-{int(interval * 1e4)}-{i:04d}.h5"
            size = (1 << 20) * (1 + i % 8) + 12345
            b.send("poll_open_read", rel, timeout, interval)
            time.sleep(0.005)
            t_pub = a.call("publish", rel, i, size, fsync, how)
            t_seen, seq, why, errs = b.result()
            if isinstance(t_pub, str):  # the operation itself failed: said once
                failed = t_pub
                break
            lags.append(None if t_seen is None else t_seen - t_pub)
            if why:
                problems[why] = problems.get(why, 0) + 1
            for k, v in errs.items():
                errors[k] = errors.get(k, 0) + v
            if problems.get("never appeared", 0) >= 3 and i < rounds - 1:
                problems[f"gave up after round {i + 1} of {rounds}"] = 1
                break
        label = f"publish {how} fsync={int(fsync)} (B polls every {interval * 1e3:g} ms)"
        if failed:
            say(label, f"the {how} itself failed on A: {failed}")
            continue
        say(f"{label}: B opened it {pct(lags)} after the {how} returned on A",
            f"torn or missing: {sum(problems.values())} {problems or ''}; B's failed opens while polling {errors}")


def probe_negative_lookups(a, b, run, dir_a, rounds, timeout):
    # negative lookups: B looks a name up (not there yet) every 20 ms while A publishes it,
    # as TeacherPool::load_exact does; a name still not seen after 3 s: does a listing help?
    a.call("mkdir", f"{run}/neg")
    outcomes = {}
    for i in range(min(rounds, 10)):
        name = f"ckpt-{i:09d}.h5"
        b.send("negative_then_seen", f"{run}/neg", name, 3.0)
        time.sleep(0.3)
        a.call("publish", f"{run}/neg/{name}", i, 4096, True, "codistill")
        r = b.result()
        outcomes[r] = outcomes.get(r, 0) + 1
    say("name looked up by B every 20 ms before A publishes it", outcomes)


def probe_rename_over(a, b, run, dir_a, rounds, timeout):
    # rename over an existing file, A writing versions while B reads.
    a.call("publish", f"{run}/over.bin", 0, 65536, True, "rename")
    a.send("writer_loop", f"{run}/over.bin", 5.0, 65536)
    b.send("reader_loop", f"{run}/over.bin", 5.0)
    versions, seen = a.result(), b.result()
    say("rename over existing (A renames 64 KiB versions for 5 s, B reads in a loop)", f"A wrote {versions} versions; B saw {seen}")
    a.send("reader_loop", f"{run}/over.bin", 0.5)
    say("rename over existing, A reading its own mount after", a.result())


def probe_noreplace(a, b, run, dir_a, rounds, timeout):
    # renameat2(RENAME_NOREPLACE) onto an existing name
    a.call("create", f"{run}/nr-target", "old")
    a.call("create", f"{run}/nr-src", "new")
    say("renameat2 NOREPLACE onto an existing file", ename(renameat2_noreplace(f"{dir_a}/{run}/nr-src", f"{dir_a}/{run}/nr-target")) + ", target holds " + repr(a.call("read_text", f"{run}/nr-target")))
    a.call("create", f"{run}/nr-src2", "x")
    say("renameat2 NOREPLACE onto a free name", ename(renameat2_noreplace(f"{dir_a}/{run}/nr-src2", f"{dir_a}/{run}/nr-free")))
    # the same, but the target created on B a moment earlier (A has not looked it up yet)
    b.call("create", f"{run}/nr-target-b", "from B")
    a.call("create", f"{run}/nr-src3", "from A")
    say("renameat2 NOREPLACE on A onto a file just created on B", ename(renameat2_noreplace(f"{dir_a}/{run}/nr-src3", f"{dir_a}/{run}/nr-target-b")) + ", target holds " + repr(b.call("read_text", f"{run}/nr-target-b")))


def probe_ownership_races(a, b, run, dir_a, rounds, timeout):
    # link(), O_EXCL and NOREPLACE races between the two clients for one name
    for race in ("link", "excl", "noreplace"):
        outcomes = {}
        for i in range(rounds):
            rel = f"{run}/owner-{race}-{i}"
            start = time.time() + 0.05
            a.send("race_" + race, rel, f"A{i}", start)
            b.send("race_" + race, rel, f"B{i}", start)
            ra, rb = a.result(), b.result()
            key = "+".join(sorted([ra, rb]))
            outcomes[key] = outcomes.get(key, 0) + 1
            content = a.call("read_text", rel)
            if (ra == "won") != content.startswith("A") and "won" in (ra, rb):
                outcomes["content disagrees with winner"] = outcomes.get("content disagrees with winner", 0) + 1
        say(f"{race} race, A and B at the same moment for one name ({rounds} rounds)", outcomes)
    a.call("create", f"{run}/lnk-src", "x")
    a.call("create", f"{run}/lnk-dst", "y")
    try:
        os.link(f"{dir_a}/{run}/lnk-src", f"{dir_a}/{run}/lnk-dst")
        r = "ok (replaced!)"
    except OSError as e:
        r = ename(e.errno)
    say("link onto an existing name", r)
    b.call("create", f"{run}/lnk-dst-b", "y")
    try:
        os.link(f"{dir_a}/{run}/lnk-src", f"{dir_a}/{run}/lnk-dst-b")
        r = "ok (replaced!)"
    except OSError as e:
        r = ename(e.errno)
    say("link on A onto a name just created on B", r)
    say("link count after link", os.stat(f"{dir_a}/{run}/lnk-src").st_nlink)


def probe_mtime(a, b, run, dir_a, rounds, timeout):
    # mtime: resolution, touch (heartbeat) and explicit times seen from B
    a.call("create", f"{run}/hb", "{}")
    ns = [a.call("touch", f"{run}/hb", None) for _ in range(5)]
    say("mtime ns after touch (5 on A)", ns)
    say("mtime sub-second digits present", any(n % 1_000_000_000 for n in ns))
    lags = []
    for i in range(min(rounds, 10)):
        time.sleep(1.1)  # a new second, so the mtime surely changes
        b.call("stat", f"{run}/hb")  # B has it cached now
        t0 = time.time()
        target = a.call("touch", f"{run}/hb", None)
        t_seen, last = b.call("poll_mtime", f"{run}/hb", target, 10.0)
        lags.append(None if t_seen is None else t_seen - t0)
    say("touch on A seen in B's stat", pct(lags))
    b.call("stat", f"{run}/hb")
    target = a.call("touch", f"{run}/hb", (time.time() + 86400, time.time() + 86400))
    t0 = time.time()
    t_seen, last = b.call("poll_mtime", f"{run}/hb", target, 10.0)
    say("explicit utime a day ahead on A seen in B's stat", f"after {(t_seen - t0) * 1e3:.1f} ms" if t_seen else f"not within 10 s (B sees {last})")
    skew = (b.call("stat", f"{run}/hb")["mtime_ns"] - target)
    say("B's mtime minus A's after it", skew)
    a.call("create", f"{run}/clock", "x")
    st = a.call("stat", f"{run}/clock")
    say("new file's mtime minus this host's clock (s)", f"{st['mtime_ns'] / 1e9 - time.time():.3f}")


def probe_append(a, b, run, dir_a, rounds, timeout):
    # size of an appended file (metrics.jsonl, train.log)
    a.call("create", f"{run}/append", "")
    lags = []
    for i in range(min(rounds, 20)):
        b.call("stat", f"{run}/append")
        size = a.call("stat", f"{run}/append")["size"] + 100
        t0 = time.time()
        a.call("append", f"{run}/append", "x" * 100)
        t = b.call("poll_size", f"{run}/append", size, 10.0)
        lags.append(None if t is None else t - t0)
    say("append on A (100 bytes, closed) seen in B's stat size", pct(lags))


def probe_listing(a, b, run, dir_a, rounds, timeout):
    # readdir: a new file on A in B's listing, an unlinked one gone from it
    a.call("mkdir", f"{run}/list")
    b.call("poll_listdir", f"{run}/list", "none", True, 0.0)  # B has listed it once
    add, rm, open_after = [], [], {}
    for i in range(rounds):
        name = f"ckpt-{i:09d}.h5"
        b.send("poll_listdir", f"{run}/list", name, True, timeout)
        time.sleep(0.005)
        t0 = a.call("publish", f"{run}/list/{name}", i, 4096, True, "rename")
        t = b.result()
        add.append(None if t is None else t - t0)
        b.send("poll_listdir", f"{run}/list", name, False, timeout)
        time.sleep(0.005)
        t0 = a.call("unlink", f"{run}/list/{name}")
        t = b.result()
        rm.append(None if t is None else t - t0)
        r = b.call("read_text", f"{run}/list/{name}")
        open_after[r[:40]] = open_after.get(r[:40], 0) + 1
    say("new file on A listed by B (readdir lag)", pct(add))
    say("file unlinked on A gone from B's listing", pct(rm))
    say("B opens the unlinked file right after", open_after)


def probe_held_files(a, b, run, dir_a, rounds, timeout):
    # unlink of a file a reader on B has open (retention deleting what a peer reads)
    for how in ("unlink", "rename over"):
        rel = f"{run}/held-{how.replace(' ', '-')}.h5"  # a fresh name each: no earlier inode cached
        a.call("publish", rel, 7, 8 << 20, True, "rename")
        opened = b.call("open_hold", rel)
        if opened is not True:
            say(f"B reads on from an open file {how} on A", f"B's open failed: {opened}")
            continue
        if how == "unlink":
            a.call("unlink", rel)
        else:
            a.call("publish", rel, 8, 4096, True, "rename")
        say(f"B reads on from an open file {how} on A", b.call("read_held"))
    # a name deleted and published again (a worker's folder after a restart from scratch)
    rel = f"{run}/again.h5"
    a.call("publish", rel, 1, 4096, True, "rename")
    first = b.call("poll_open_read", rel, 5.0)[2] or "read whole"
    a.call("unlink", rel)
    a.call("publish", rel, 2, 4096, True, "rename")
    t_seen, seq, why, errs = b.call("poll_open_read", rel, 5.0)
    say("a name B has read, unlinked and published again on A: B's next open", f"first read: {first}; then {why or 'seq %d' % seq}, failed opens before {errs}")


def probe_sync_and_locks(a, b, run, dir_a, rounds, timeout):
    # fsync on folders, sync_file_range
    say("fsync of a folder fd", a.call("fsync_dir", run))
    say("fsync of the mount's root folder fd", a.call("fsync_dir", "."))
    a.call("create", f"{run}/sfr", "x" * 100000)
    say("sync_file_range(SYNC_FILE_RANGE_WRITE)", a.call("sync_file_range", f"{run}/sfr"))

    # locks
    for kind in ("flock", "fcntl"):
        ra = a.call("lock", f"{run}/lock-{kind}", kind)
        rb = b.call("lock", f"{run}/lock-{kind}", kind)
        say(f"{kind} exclusive: A then B", f"A {ra}, B {rb}")
        a.call("unlock")
        if rb == "locked":
            b.call("unlock")


def probe_permissions(a, b, run, dir_a, rounds, timeout):
    # permissions: chmod 000 on A, a non-root reader on B
    if os.geteuid() == 0:
        a.call("mkdir", f"{run}/peer")
        os.chmod(f"{dir_a}/{run}", 0o755)
        b.call("poll_list_as_nobody", f"{run}/peer", False, 5.0)  # B (nobody) has listed it
        t0 = a.call("chmod", f"{run}/peer", 0)
        t, e = b.call("poll_list_as_nobody", f"{run}/peer", True, 20.0)
        say("chmod 000 on A: a non-root lister on B fails", f"after {(t - t0) * 1e3:.1f} ms with {e}" if t else "not within 20 s")
        t0 = a.call("chmod", f"{run}/peer", 0o755)
        t, e = b.call("poll_list_as_nobody", f"{run}/peer", False, 20.0)
        say("chmod 755 again on A: B lists again", f"after {(t - t0) * 1e3:.1f} ms" if t else "not within 20 s")


PROBES = (probe_publish, probe_negative_lookups, probe_rename_over, probe_noreplace, probe_ownership_races,
          probe_mtime, probe_append, probe_listing, probe_held_files, probe_sync_and_locks, probe_permissions)


def main():
    args = sys.argv[1:]
    rounds, timeout = 30, 20.0  # timeout: how long B waits for a file A published
    for flag in ("--rounds", "--timeout"):
        if flag in args:
            i = args.index(flag)
            if flag == "--rounds":
                rounds = int(args[i + 1])
            else:
                timeout = float(args[i + 1])
            del args[i : i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    dir_a, dir_b = (os.path.abspath(a) for a in args)
    a, b = Client("A", dir_a), Client("B", dir_b)
    run = f"probe-{os.getpid()}"
    a.call("mkdir", run)
    say("client A", f"{dir_a} {a.call('statfs')}")
    say("client B", f"{dir_b} {b.call('statfs')}")
    say("same folder", os.path.samestat(os.stat(dir_a), os.stat(dir_b)) if dir_a != dir_b else "one path (local baseline)")
    for probe in PROBES:
        probe(a, b, run, dir_a, rounds, timeout)
    a.close()
    b.close()
    import shutil

    shutil.rmtree(os.path.join(dir_a, run), ignore_errors=True)


if __name__ == "__main__":
    mp.set_start_method("fork")
    main()
