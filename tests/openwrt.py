"""Stand-ins for the parts of OpenWrt that the procd init script and the package's scripts
call (rc.common's config_* helpers and enable/disable, procd's shell API, logger,
network.sh), written from their documented behaviour, and a throwaway root to chroot into
so that /etc/init.d/qlshadow and /etc/rc.common are at their real paths."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess

from helpers import ROOT

INIT = os.path.join(ROOT, "conf", "qlshadow.init")
UCI = os.path.join(ROOT, "conf", "qlshadow.uci")
OPENWRT = os.path.join(ROOT, "conf", "openwrt")
SHELLS = {"busybox": ["busybox", "sh"], "dash": ["dash"], "bash": ["bash"]}
STATIC_BUSYBOX = "/opt/qlshadow-ci/busybox-static/bin/busybox"

# rc.common's UCI helpers over UCI_<option> variables, and procd's calls, each printed as
# one line ("param [command] [/usr/bin/qlshadow] ...") on stdout or on fd CALLS_FD.
STANDINS = r"""
config_load() { echo "config_load $1" >&${CALLS_FD:-1}; }
# As functions.sh: an empty option reads as unset, and gets the default.
config_get() { eval "$1=\${UCI_$3:-\$4}"; }
config_get_bool() {
	config_get "$1" "$2" "$3" "$4"
	eval "_v=\$$1"
	case $_v in 1|on|true|yes|enabled) _v=1 ;; *) _v=0 ;; esac
	eval "$1=\$_v"
}
logger() { echo "logger $*" >&${CALLS_FD:-1}; }
procd_open_instance() { echo "open_instance" >&${CALLS_FD:-1}; }
procd_close_instance() { echo "close_instance" >&${CALLS_FD:-1}; }
procd_set_param() { { printf 'param'; printf ' [%s]' "$@"; echo; } >&${CALLS_FD:-1}; }
procd_add_reload_trigger() { echo "reload_trigger $*" >&${CALLS_FD:-1}; }
procd_add_reload_interface_trigger() { echo "interface_trigger $*" >&${CALLS_FD:-1}; }
procd_add_reload_mount_trigger() { echo "mount_trigger $*" >&${CALLS_FD:-1}; }
# procd.sh: the fstab mount points (here: FSTAB_MOUNT) that a path lies under.
procd_get_mountpoints() {
	[ -n "$FSTAB_MOUNT" ] || return 0
	case $1/ in "$FSTAB_MOUNT"/*) echo "$FSTAB_MOUNT" ;; esac
}
# network.sh: the interface's addresses (here: NET4, NET6), space separated.
network_get_ipaddrs() { eval "$1=\$NET4"; }
network_get_ipaddrs6() { eval "$1=\$NET6"; }
"""

HARNESS = STANDINS + r"""
enabled() { [ "$ENABLED" = 1 ]; }
. "$INIT"
start_service
service_triggers
"""

# /etc/rc.common for a chroot: sources the init script and runs the action, as OpenWrt's
# does; enable/disable/enabled manage /etc/rc.d/S<START><name> (and K<STOP>), and procd's
# calls go to /calls.
RC_COMMON = STANDINS + r"""
initscript=$1
action=$2
shift 2
name=${initscript##*/}
enable() {
	ln -sf "../init.d/$name" "$IPKG_INSTROOT/etc/rc.d/S$START$name"
	ln -sf "../init.d/$name" "$IPKG_INSTROOT/etc/rc.d/K$STOP$name"
}
disable() { rm -f "$IPKG_INSTROOT/etc/rc.d/S"??"$name" "$IPKG_INSTROOT/etc/rc.d/K"??"$name"; }
enabled() { [ -L "$IPKG_INSTROOT/etc/rc.d/S$START$name" ]; }
. "$initscript"
start() { start_service "$@"; service_triggers; }
stop() { echo "kill $name" >&3; }
restart() { stop; start; }
exec 3>> "$IPKG_INSTROOT/calls"
CALLS_FD=3
"$action" "$@"
"""


def uci_defaults() -> dict:
    """The options of section 'main' as conf/qlshadow.uci sets them (comments skipped)."""
    options, section = {}, None
    with open(UCI, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        words = line.strip().split(None, 2)
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "config":
            section = words[2].strip("'\"") if len(words) > 2 else None
        elif words[0] == "option" and section == "main":
            options[words[1]] = words[2].strip("'\"")
    return options


def init_options() -> tuple:
    """({uci option: setting}, {uci option: check}) as conf/qlshadow.init declares them."""
    with open(INIT, encoding="utf-8") as fh:
        text = fh.read()
    settings, checks = {}, {}
    for block in ("UCI_SETTINGS", "UCI_OWN"):
        body = re.search(rf'^{block}="\n(.*?)^"', text, re.S | re.M).group(1)
        for line in body.split():
            parts = line.split(":")
            if len(parts) == 3:
                settings[parts[0]] = parts[1]
            checks[parts[0]] = parts[-1]
    return settings, checks


def procd_calls(shell="busybox", env=None, **uci) -> list:
    """start_service and service_triggers with UCI = the shipped defaults, a readable
    conf_file, and uci; env: extra variables (ENABLED, FSTAB_MOUNT, NET4, PKG_UPGRADE)."""
    options = {**uci_defaults(), "conf_file": os.path.join(ROOT, "conf", "qlshadow.conf"), **uci}
    full = {"PATH": os.environ["PATH"], "INIT": INIT, "ENABLED": "1", **(env or {})}
    full.update({f"UCI_{k}": v for k, v in options.items()})
    result = subprocess.run([*SHELLS[shell], "-c", HARNESS], env=full, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def params(calls: list, name: str) -> list:
    """The arguments of every procd_set_param NAME call."""
    return [re.findall(r"\[([^\]]*)\]", line)[1:] for line in calls
            if line.startswith(f"param [{name}]")]


def environment(calls: list) -> dict:
    """The instance's environment as a dict."""
    found = params(calls, "env")
    return dict(pair.split("=", 1) for pair in found[0]) if found else {}


def make_root(path, shell: str) -> str:
    """A root to chroot into: /bin/sh is the given shell (with its libraries), BusyBox's
    applets beside it, OpenWrt's init script and the rc.common stand-in at their paths."""
    root = str(path)
    for sub in ("bin", "etc/init.d", "etc/rc.d", "etc/qlshadow", "lib/upgrade", "tmp"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    os.makedirs(os.path.join(root, "dev"))
    os.mknod(os.path.join(root, "dev", "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    shutil.copy(STATIC_BUSYBOX, os.path.join(root, "bin", "busybox"))
    for applet in ("ln", "rm", "cat", "sed", "awk", "env", "tail", "find", "sort", "mv", "echo"):
        os.symlink("busybox", os.path.join(root, "bin", applet))
    if shell == "busybox":
        os.symlink("busybox", os.path.join(root, "bin", "sh"))
    else:
        binary = shutil.which(shell)
        shutil.copy(binary, os.path.join(root, "bin", "sh"))
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        for lib in re.findall(r"(/\S+\.so[.\d]*)", out):
            target = os.path.join(root, lib.lstrip("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy(lib, target)
    shutil.copy(INIT, os.path.join(root, "etc", "init.d", "qlshadow"))
    os.chmod(os.path.join(root, "etc", "init.d", "qlshadow"), 0o755)
    with open(os.path.join(root, "etc", "rc.common"), "w", encoding="utf-8") as fh:
        fh.write(RC_COMMON)
    with open(os.path.join(root, "etc", "qlshadow", "qlshadow.conf"), "w", encoding="utf-8") as fh:
        fh.write("QL_DATA_DIR=/srv/qlshadow\n")
    return root


def in_root(root: str, script: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a shell script inside root (chroot), with only env and a PATH."""
    full = {"PATH": "/bin", **(env or {})}
    return subprocess.run([shutil.which("chroot") or "chroot", root, "/bin/sh", "-c", script], env=full,
                          capture_output=True, text=True, timeout=30)
