"""Whether a cron daemon runs to start the crontab we install, and on OpenWrt starting it.

OpenWrt's /etc/init.d/cron starts crond at boot only when /etc/crontabs/ held a file then,
so on a fresh router the crontab we install is read by nobody: after an install there, the
service enables and starts crond once. Everywhere, /health and `qlshadow status` say
"installed, crond not running" when no cron daemon runs. The check reads /proc (no
dependency) and only when asked: never on the callback path.
"""
from __future__ import annotations

import logging
import os
import subprocess

log = logging.getLogger("qlshadow")

# Where the host's files are; tests point these at a tree of their own.
ROOT = "/"
PROC = "/proc"
# Process names of cron daemons: BusyBox and cronie "crond", Debian's Vixie "cron".
DAEMONS = frozenset({"crond", "cron"})
NOT_RUNNING = "installed, crond not running"
START_TIMEOUT = 20  # seconds for each of `enable` and `start`

_started: set = set()  # init scripts this process already ran: enable and start once


def is_openwrt(root: str | None = None) -> bool:
    """True on OpenWrt with its cron init script."""
    root = ROOT if root is None else root
    return (os.path.exists(os.path.join(root, "etc/openwrt_release"))
            and os.path.exists(_init_script(root)))


def _init_script(root: str) -> str:
    return os.path.join(root, "etc/init.d/cron")


def _name_of(pid_dir: str) -> str | None:
    """The program a process runs, by its comm, or argv[1] of a BusyBox applet call."""
    try:
        with open(os.path.join(pid_dir, "comm"), "rb") as fh:
            comm = fh.read().strip().decode("utf-8", "replace")
        if comm != "busybox":
            return comm
        with open(os.path.join(pid_dir, "cmdline"), "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:  # it ended meanwhile, or is not ours to read
        return None
    return argv[1].decode("utf-8", "replace") if len(argv) > 1 else comm


def _is_busybox(pid_dir: str) -> bool | None:
    """Whether the process runs BusyBox: its comm, the program its exe links to, or (exe
    unreadable: another user's process) the program its absolute argv[0] links to, as
    OpenWrt's /usr/sbin/crond -> /bin/busybox; None when nothing tells."""
    try:
        with open(os.path.join(pid_dir, "comm"), "rb") as fh:
            if fh.read().strip() == b"busybox":
                return True
    except OSError:
        return None
    try:
        program = os.readlink(os.path.join(pid_dir, "exe"))
    except OSError:
        try:
            with open(os.path.join(pid_dir, "cmdline"), "rb") as fh:
                argv0 = fh.read().split(b"\0")[0].decode("utf-8", "replace")
        except OSError:
            return None
        if not argv0.startswith("/"):
            return None
        program = os.path.realpath(argv0)
    return os.path.basename(program).startswith("busybox")


BUSYBOX, OVERLAPPING = "busybox", "overlapping"
_KIND_TTL = 300  # seconds a process keeps the kind it found
_kind_seen: list = []  # [(when, proc, kind)]: the last scan of this process


def daemon_kind(proc: str | None = None, now: float | None = None) -> str | None:
    """Which cron daemon runs, by a scan of /proc: "busybox" when every one is BusyBox
    crond (it skips a firing while the line's previous run is still going), "overlapping"
    when one is another cron (Vixie/Debian cron, cronie: they start overlapping runs),
    None when none runs, or its program cannot be told, or /proc cannot be read. Kept for
    a few minutes per process."""
    import time
    proc = PROC if proc is None else proc
    now = time.time() if now is None else now
    if _kind_seen and _kind_seen[0][1] == proc and now - _kind_seen[0][0] < _KIND_TTL:
        return _kind_seen[0][2]
    try:
        entries = os.listdir(proc)
    except OSError:
        return None
    kinds = set()
    for entry in entries:
        if entry.isdigit():
            pid_dir = os.path.join(proc, entry)
            if _name_of(pid_dir) in DAEMONS:
                busybox = _is_busybox(pid_dir)
                kinds.add(None if busybox is None else BUSYBOX if busybox else OVERLAPPING)
    # One daemon that overlaps runs decides; a daemon of unknown kind leaves it unknown.
    kind = (OVERLAPPING if OVERLAPPING in kinds else None if None in kinds
            else BUSYBOX if kinds else None)
    _kind_seen[:] = [(now, proc, kind)]
    return kind


def kind_for(settings) -> str | None:
    """The daemon whose firings the gate and health judge: daemon_kind() in system mode,
    None otherwise (nothing is installed into a crontab, so no daemon is assumed)."""
    return daemon_kind() if settings.scheduler == "system" else None


def crond_running(proc: str | None = None) -> bool:
    """True when some process is a cron daemon (crond or cron), by a scan of /proc."""
    proc = PROC if proc is None else proc
    try:
        entries = os.listdir(proc)
    except OSError:
        return True  # no /proc to read: nothing can be said, so nothing is claimed
    return any(entry.isdigit() and _name_of(os.path.join(proc, entry)) in DAEMONS
               for entry in entries)


def ensure_running(root: str | None = None, proc: str | None = None) -> str | None:
    """On OpenWrt, enable and start crond once if it does not run; says what it did.

    Called after our block was installed; elsewhere (or when crond runs) it does nothing.
    A failure is logged and left to /health to report.
    """
    root = ROOT if root is None else root
    if not is_openwrt(root):
        return None
    script = _init_script(root)
    if script in _started or crond_running(proc):
        return None
    _started.add(script)
    for action in ("enable", "start"):
        try:
            result = subprocess.run([script, action], stdin=subprocess.DEVNULL,
                                    capture_output=True, timeout=START_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("cannot %s crond with %s: %s", action, script, exc)
            return f"crond not started: {script} {action} failed"
        if result.returncode != 0:
            log.warning("%s %s exited %d: crond does not start our crontab", script, action,
                        result.returncode)
            return f"crond not started: {script} {action} exited {result.returncode}"
    log.info("crond was not running: enabled and started it with %s", script)
    return "crond enabled and started"


def crontab_words(state: str, proc: str | None = None) -> str:
    """An install state (crontab.install_state) with whether crond runs to read it."""
    if state == "installed" and not crond_running(proc):
        return NOT_RUNNING
    return state
