"""A FUSE file system for the tests that loses what was not fsynced when the power is "cut".

Like Jepsen's LazyFS: a passthrough over a backing directory in which the backing files
hold only what is durable. Writes and truncations land in an in-memory copy of the file
(what a kernel's page cache would hold) and reach the backing file only on fsync or
fdatasync of that file; close does not make anything durable. A file created since its
directory was last fsynced disappears at a cut (SQLite fsyncs the directory after making
its WAL). Unlink, rename and mkdir reach the backing directory at once: a simplification
that SQLite's WAL mode does not depend on (it deletes the WAL only on a clean close).

A cut drops every unsynced byte and every file handle opened before it, so a write that
a killed process left in flight is refused instead of landing after the cut. The kernel's
page cache is emptied for a file on its next open (libfuse's default, no keep_cache) and
attributes are never cached, so a process started after a cut reads the surviving files.

The fsyncs of one file can be held back (they wait, as on a slow disk, until released) or
made to fail with EIO, so a test can look at what a process does meanwhile or then.

The file system runs in its own process (`python tests/lazyfs.py BACKING MOUNT`), driven
through its standard input, one command a line, each answered with one JSON line:
`cut` (drop unsynced state), `stats` (counters), `hold PATH` / `release PATH` (fsyncs of
PATH wait / go on), `fail PATH` / `heal PATH` (fsyncs of PATH fail with EIO / succeed),
`quit`. The tests use the LazyFS class.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading

PAGE = 4096


class MountFailed(RuntimeError):
    """FUSE could not mount here (no /dev/fuse, no fusermount3, no mfusepy or no permission)."""


class LazyFS:
    """The test's handle on a running LazyFS process: mount on enter, unmount on exit."""

    def __init__(self, backing: str, mount: str):
        self.backing = backing
        self.mount = mount
        self._proc: subprocess.Popen | None = None
        self._ask_lock = threading.Lock()  # one command and its answer at a time

    def __enter__(self) -> LazyFS:
        why = unavailable_reason()
        if why:
            raise MountFailed(why)
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mount, exist_ok=True)
        # Its messages go to a file: a pipe nobody drains would stall the file system.
        self.log_path = self.backing.rstrip("/") + ".log"
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), self.backing, self.mount],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        ready = self._proc.stdout.readline()
        if not ready.startswith("ready"):
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()
            self._proc = None
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                raise MountFailed("LazyFS did not mount: " + (log.read().strip()
                                                               or "no reason given"))
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _ask(self, command: str) -> dict:
        with self._ask_lock:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
            return json.loads(self._proc.stdout.readline())

    def cut(self) -> dict:
        """Lose everything not fsynced, as a power cut does; returns what was dropped."""
        return self._ask("cut")

    def stats(self) -> dict:
        """Counters since the mount: fsyncs (also per path), bytes written, bytes made durable,
        fsyncs waiting now (fsyncs_held) and fsyncs failed."""
        return self._ask("stats")

    def hold(self, path: str) -> None:
        """Make every fsync of path (inside the mount, "/data/x") wait until release(path)."""
        self._ask("hold " + path)

    def release(self, path: str) -> None:
        """Let the held fsyncs of path, and later ones, go on."""
        self._ask("release " + path)

    def fail(self, path: str) -> None:
        """Make every fsync of path fail with EIO (durable nothing) until heal(path)."""
        self._ask("fail " + path)

    def heal(self, path: str) -> None:
        self._ask("heal " + path)

    def close(self) -> None:
        """Unmount (fusermount3 -u) and wait for this LazyFS process, and only it, to end."""
        if self._proc is None:
            return
        subprocess.run(["fusermount3", "-u", "-z", self.mount], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc.stdout.close()
        self._proc = None


def unavailable_reason() -> str | None:
    """Why FUSE cannot mount on this machine, or None when it can be tried."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (Debian's fuse3 package, or mknod /dev/fuse c 10 229)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian's fuse3 package)"
    try:
        import mfusepy  # noqa: F401 -- the test extra brings it
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot load libfuse: {exc}"
    return None


class _File:
    """A file's contents as the callers see them, and which pages differ from the backing file."""
    __slots__ = ("data", "dirty")

    def __init__(self, data: bytearray):
        self.data = data
        self.dirty: set[int] = set()  # page numbers written since the last fsync


def _serve(backing: str, mount: str) -> None:
    from mfusepy import FUSE, FuseOSError, Operations

    class Lazy(Operations):
        use_ns = True

        def __init__(self):
            # Not "lock": that name is a FUSE operation, and defining it would take POSIX
            # locks away from the kernel, which keeps them right for SQLite when we don't.
            # (So the fsync controls below end in _fsyncs: "release" is one too.)
            self.mutex = threading.RLock()
            self.files: dict[str, _File] = {}  # mount path -> in-memory contents
            self.handles: dict[int, tuple[int, int]] = {}  # fh -> (backing fd, epoch)
            self.next_fh = 1
            self.epoch = 0
            self.new_names: set[str] = set()  # created since their directory's last fsync
            self.fsyncs_by_path: dict[str, int] = {}
            self.counts = {"fsyncs": 0, "fsyncdirs": 0, "bytes_written": 0,
                           "bytes_made_durable": 0, "cuts": 0, "late_writes_refused": 0,
                           "fsyncs_held": 0, "fsyncs_failed": 0}
            self.holds: dict[str, threading.Event] = {}  # path -> set once released
            self.failing: set[str] = set()

        # -- helpers ------------------------------------------------------------------
        def real(self, path: str) -> str:
            return os.path.join(backing, path.lstrip("/"))

        def fd(self, fh: int) -> int:
            entry = self.handles.get(fh)
            if entry is None or entry[1] != self.epoch:
                # A handle from before the last cut: its process is dead, its write is late.
                self.counts["late_writes_refused"] += 1
                raise FuseOSError(errno.EIO)
            return entry[0]

        def loaded(self, path: str) -> _File:
            file = self.files.get(path)
            if file is None:
                with open(self.real(path), "rb") as fh:
                    file = self.files[path] = _File(bytearray(fh.read()))
            return file

        @staticmethod
        def grow(file: _File, size: int) -> None:
            # The new zeros are dirty too: the backing file may still hold older bytes there.
            start = len(file.data)
            file.data.extend(bytes(size - start))
            file.dirty.update(range(start // PAGE, (size - 1) // PAGE + 1))

        def new_handle(self, fd: int) -> int:
            fh = self.next_fh
            self.next_fh += 1
            self.handles[fh] = (fd, self.epoch)
            return fh

        # -- metadata -----------------------------------------------------------------
        def getattr(self, path, fh=None):
            with self.mutex:
                st = os.lstat(self.real(path))
                attrs = {key: getattr(st, key) for key in (
                    "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns",
                    "st_mtime_ns", "st_ctime_ns", "st_ino")}
                for key in ("st_atime", "st_mtime", "st_ctime"):
                    attrs[key] = attrs.pop(key + "_ns")
                file = self.files.get(path)
                if file is not None:
                    attrs["st_size"] = len(file.data)
                attrs["st_blocks"] = (attrs["st_size"] + 511) // 512
                return attrs

        def access(self, path, amode):
            if not os.access(self.real(path), amode):
                raise FuseOSError(errno.EACCES)
            return 0

        def readdir(self, path, fh):
            return [".", ".."] + os.listdir(self.real(path))

        def mkdir(self, path, mode):
            os.mkdir(self.real(path), mode)
            return 0

        def rmdir(self, path):
            os.rmdir(self.real(path))
            return 0

        def chmod(self, path, mode):
            os.chmod(self.real(path), mode)
            return 0

        def chown(self, path, uid, gid):
            os.chown(self.real(path), uid, gid)
            return 0

        def utimens(self, path, times=None):
            os.utime(self.real(path), ns=times)
            return 0

        def unlink(self, path):
            with self.mutex:
                os.unlink(self.real(path))
                self.files.pop(path, None)
                self.new_names.discard(path)
            return 0

        def rename(self, old, new):
            with self.mutex:
                os.rename(self.real(old), self.real(new))
                self.files.pop(new, None)
                if old in self.files:
                    self.files[new] = self.files.pop(old)
                if old in self.new_names:
                    self.new_names.discard(old)
                    self.new_names.add(new)
            return 0

        def statfs(self, path):
            st = os.statvfs(self.real(path))
            return {key: getattr(st, key) for key in (
                "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                "f_favail", "f_flag", "f_namemax")}

        # -- files --------------------------------------------------------------------
        def create(self, path, mode, fi=None):
            with self.mutex:
                existed = os.path.exists(self.real(path))
                fd = os.open(self.real(path), os.O_RDWR | os.O_CREAT, mode)
                if not existed:
                    self.new_names.add(path)
                    self.files[path] = _File(bytearray())
                return self.new_handle(fd)

        def open(self, path, flags):
            with self.mutex:
                # Truncation is a write like any other: kept in memory until an fsync.
                fd = os.open(self.real(path), os.O_RDWR if (flags & os.O_ACCMODE) != os.O_RDONLY
                             else os.O_RDONLY)
                if flags & os.O_TRUNC:
                    self.truncate(path, 0)
                return self.new_handle(fd)

        def read(self, path, size, offset, fh):
            with self.mutex:
                fd = self.fd(fh)
                file = self.files.get(path)
                if file is None:
                    return os.pread(fd, size, offset)
                return bytes(file.data[offset:offset + size])

        def write(self, path, data, offset, fh):
            with self.mutex:
                self.fd(fh)
                file = self.loaded(path)
                end = offset + len(data)
                if end > len(file.data):
                    self.grow(file, end)
                file.data[offset:end] = data
                file.dirty.update(range(offset // PAGE, (end - 1) // PAGE + 1))
                self.counts["bytes_written"] += len(data)
                return len(data)

        def truncate(self, path, length, fh=None):
            with self.mutex:
                if fh is not None:
                    self.fd(fh)
                file = self.loaded(path)
                if length < len(file.data):
                    del file.data[length:]
                else:
                    self.grow(file, length)
                return 0

        def fsync(self, path, datasync, fh):
            gate = self.holds.get(path)
            if gate is not None:  # waits outside the mutex: other calls go on meanwhile
                with self.mutex:
                    self.counts["fsyncs_held"] += 1
                gate.wait()
                with self.mutex:
                    self.counts["fsyncs_held"] -= 1
            with self.mutex:
                self.fd(fh)
                if path in self.failing:
                    self.counts["fsyncs_failed"] += 1
                    raise FuseOSError(errno.EIO)
                self.counts["fsyncs"] += 1
                self.fsyncs_by_path[path] = self.fsyncs_by_path.get(path, 0) + 1
                file = self.files.get(path)
                if file is None:
                    return 0
                wfd = os.open(self.real(path), os.O_WRONLY)
                try:
                    os.ftruncate(wfd, len(file.data))
                    for page in sorted(file.dirty):
                        chunk = bytes(file.data[page * PAGE:(page + 1) * PAGE])
                        if chunk:
                            os.pwrite(wfd, chunk, page * PAGE)
                            self.counts["bytes_made_durable"] += len(chunk)
                finally:
                    os.close(wfd)
                file.dirty.clear()
                return 0

        def opendir(self, path):
            return 0

        def fsyncdir(self, path, datasync, fh):
            with self.mutex:
                self.counts["fsyncdirs"] += 1
                prefix = "/" if path == "/" else path + "/"
                self.new_names = {name for name in self.new_names
                                  if not (name.startswith(prefix) and "/" not in name[len(prefix):])}
            return 0

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            with self.mutex:
                entry = self.handles.pop(fh, None)
                if entry is not None:
                    os.close(entry[0])
            return 0

        def init(self, path):
            threading.Thread(target=control, daemon=True).start()
            sys.stdout.write("ready\n")
            sys.stdout.flush()

        # -- control ------------------------------------------------------------------
        def cut(self) -> dict:
            with self.mutex:
                lost = sum(len(f.dirty) for f in self.files.values())
                for name in self.new_names:
                    try:
                        os.unlink(self.real(name))
                    except FileNotFoundError:
                        pass
                dropped = {"pages_lost": lost, "files_lost": len(self.new_names)}
                self.files.clear()
                self.new_names.clear()
                self.epoch += 1
                self.counts["cuts"] += 1
                return dropped

        def stats(self) -> dict:
            with self.mutex:
                return dict(self.counts, fsyncs_by_path=dict(self.fsyncs_by_path),
                            unsynced_pages=sum(len(f.dirty) for f in self.files.values()))

        def hold_fsyncs(self, path: str) -> dict:
            with self.mutex:
                self.holds.setdefault(path, threading.Event())
            return {"held": path}

        def release_fsyncs(self, path: str) -> dict:
            with self.mutex:
                gate = self.holds.pop(path, None)
            if gate is not None:
                gate.set()
            return {"released": path}

        def fail_fsyncs(self, path: str) -> dict:
            with self.mutex:
                self.failing.add(path)
            return {"failing": path}

        def heal_fsyncs(self, path: str) -> dict:
            with self.mutex:
                self.failing.discard(path)
            return {"healed": path}

    lazy = Lazy()

    def control() -> None:
        on_path = {"hold": lazy.hold_fsyncs, "release": lazy.release_fsyncs,
                   "fail": lazy.fail_fsyncs, "heal": lazy.heal_fsyncs}
        for line in sys.stdin:
            command, _, path = line.strip().partition(" ")
            if command == "cut":
                answer = lazy.cut()
            elif command == "stats":
                answer = lazy.stats()
            elif command in on_path and path.startswith("/"):
                answer = on_path[command](path)
            elif command == "quit":
                break
            else:
                answer = {"error": f"unknown command {line.strip()!r}"}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
        # Standard input closed or quit: the test is done with us. Nothing stays held.
        for path in list(lazy.holds):
            lazy.release_fsyncs(path)
        subprocess.run(["fusermount3", "-u", "-z", mount], check=False)

    # attr/entry timeouts 0: a size or a name cached by the kernel would outlive a cut.
    FUSE(lazy, mount, foreground=True, nothreads=False, attr_timeout=0, entry_timeout=0,
         negative_timeout=0, fsname="lazyfs")


if __name__ == "__main__":
    _serve(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
