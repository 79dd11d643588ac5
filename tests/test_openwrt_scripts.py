"""The package's own maintainer scripts (conf/openwrt/postinst, prerm) and its sysupgrade
hook (conf/openwrt/sysupgrade.sh), run for real under BusyBox ash, dash and bash: in an
image root as an offline build runs them, and chrooted into a throwaway root where
/etc/init.d/qlshadow and the rc.common stand-in of tests/openwrt.py sit at their real
paths (procd's calls are recorded in /calls)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from openwrt import OPENWRT, SHELLS, in_root, make_root

POSTINST = os.path.join(OPENWRT, "postinst")
PRERM = os.path.join(OPENWRT, "prerm")
UCI_ENV = {"UCI_enabled": "1", "UCI_conf_file": "/etc/qlshadow/qlshadow.conf"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("chroot"),
                                reason="chroot needs root")


@pytest.fixture(params=list(SHELLS))
def root(request, tmp_path):
    """A chroot-able root whose /bin/sh is the shell under test, with the package's
    scripts at /postinst and /prerm, a recording /usr/bin/qlshadow and no uci."""
    path = make_root(tmp_path / "root", request.param)
    shutil.copy(POSTINST, os.path.join(path, "postinst"))
    shutil.copy(PRERM, os.path.join(path, "prerm"))
    os.makedirs(os.path.join(path, "usr", "bin"))
    qlshadow = os.path.join(path, "usr", "bin", "qlshadow")
    with open(qlshadow, "w", encoding="utf-8") as fh:
        fh.write('#!/bin/sh\necho "qlshadow $*" >> /calls\n'
                 'echo /srv/qlshadow/qlshadow.db.snapshot\n')
    os.chmod(qlshadow, 0o755)
    with open(os.path.join(path, "bin", "uci"), "w", encoding="utf-8") as fh:
        fh.write("#!/bin/sh\nexit 1\n")
    os.chmod(os.path.join(path, "bin", "uci"), 0o755)
    return path


def calls(root: str) -> list:
    try:
        with open(os.path.join(root, "calls"), encoding="utf-8") as fh:
            return [line for line in fh.read().splitlines() if not line.startswith("config_load")]
    except FileNotFoundError:
        return []


def start_link(root: str) -> str:
    return os.path.join(root, "etc", "rc.d", "S95qlshadow")


# --- an offline image build (ImageBuilder): IPKG_INSTROOT names the image root --------------

@pytest.mark.parametrize("shell", SHELLS)
def test_postinst_in_an_image_root_enables_the_service_and_runs_nothing(shell, tmp_path):
    image = make_root(tmp_path / "image", "busybox")
    env = {"PATH": os.environ["PATH"], "IPKG_INSTROOT": image}

    result = subprocess.run([*SHELLS[shell], POSTINST], env=env, capture_output=True, text=True,
                            timeout=30)

    assert result.returncode == 0, result.stderr
    assert os.readlink(start_link(image)) == "../init.d/qlshadow"
    assert [line for line in calls(image) if "instance" in line or "kill" in line] == []


@pytest.mark.parametrize("shell", SHELLS)
def test_prerm_in_an_image_root_removes_the_start_link(shell, tmp_path):
    image = make_root(tmp_path / "image", "busybox")
    env = {"PATH": os.environ["PATH"], "IPKG_INSTROOT": image}
    subprocess.run([*SHELLS[shell], POSTINST], env=env, check=True, timeout=30)

    result = subprocess.run([*SHELLS[shell], PRERM], env=env, capture_output=True, text=True,
                            timeout=30)

    assert result.returncode == 0, result.stderr
    assert not os.path.lexists(start_link(image))


# --- a router: chrooted -------------------------------------------------------------------

def test_a_first_install_enables_and_starts_it(root):
    result = in_root(root, "/postinst", UCI_ENV)

    assert result.returncode == 0, result.stderr
    assert os.path.islink(start_link(root))
    assert "open_instance" in calls(root)


def test_an_upgrade_restarts_an_enabled_service(root):
    assert in_root(root, "/postinst", UCI_ENV).returncode == 0
    os.unlink(os.path.join(root, "calls"))

    result = in_root(root, "/postinst", {**UCI_ENV, "PKG_UPGRADE": "1"})

    assert result.returncode == 0, result.stderr
    done = calls(root)
    assert "kill qlshadow" in done and done.index("kill qlshadow") < done.index("open_instance")
    assert os.path.islink(start_link(root))


def test_an_upgrade_keeps_a_disabled_service_disabled_and_stopped(root):
    upgrade = {**UCI_ENV, "PKG_UPGRADE": "1"}

    ours = in_root(root, "/postinst", upgrade)
    # OpenWrt's default_postinst then runs "start" on every package upgrade.
    theirs = in_root(root, "/etc/init.d/qlshadow start", upgrade)

    assert ours.returncode == 0 and theirs.returncode == 0, ours.stderr + theirs.stderr
    assert not os.path.lexists(start_link(root))
    assert "open_instance" not in calls(root) and "kill qlshadow" not in calls(root)


def test_an_upgrade_leaves_the_crontab_block_and_the_start_link(root):
    assert in_root(root, "/postinst", UCI_ENV).returncode == 0
    os.unlink(os.path.join(root, "calls"))

    result = in_root(root, "/prerm", {**UCI_ENV, "PKG_UPGRADE": "1"})

    assert result.returncode == 0, result.stderr
    assert calls(root) == []
    assert os.path.islink(start_link(root))


def test_removal_stops_disables_and_takes_the_crontab_block_out(root):
    assert in_root(root, "/postinst", UCI_ENV).returncode == 0
    os.unlink(os.path.join(root, "calls"))

    result = in_root(root, "/prerm", UCI_ENV)

    assert result.returncode == 0, result.stderr
    assert calls(root) == ["kill qlshadow", "qlshadow --config /etc/qlshadow/qlshadow.conf "
                           "crontab --remove"]
    assert not os.path.lexists(start_link(root))


# --- sysupgrade ---------------------------------------------------------------------------

# /sbin/sysupgrade's steps up to the archive (package/base-files): include /lib/upgrade,
# list the files of /etc/sysupgrade.conf and keep.d with find, run the
# sysupgrade_init_conffiles hooks with that list, print it.
SYSUPGRADE = r"""
append() { eval "$1=\"\${$1:+\${$1} }\$2\""; }
run_hooks() {
	local arg="$1" func
	shift
	for func in "$@"; do eval "$func \"\$arg\""; done
}
list_static() {
	find $(sed -ne '/^[[:space:]]*$/d; /^#/d; p' /lib/upgrade/keep.d/* 2>/dev/null) \
		\( -type f -o -type l \) 2>/dev/null | sort -u > "$1"
}
sysupgrade_init_conffiles=list_static
for file in /lib/upgrade/*.sh; do . "$file"; done
run_hooks /tmp/sysupgrade.conffiles $sysupgrade_init_conffiles
"""


def sysupgrade(root: str, **mode) -> subprocess.CompletedProcess:
    shutil.copy(os.path.join(OPENWRT, "sysupgrade.sh"),
                os.path.join(root, "lib", "upgrade", "qlshadow.sh"))
    os.makedirs(os.path.join(root, "lib", "upgrade", "keep.d"), exist_ok=True)
    shutil.copy(os.path.join(OPENWRT, "keep.d"),
                os.path.join(root, "lib", "upgrade", "keep.d", "qlshadow"))
    return in_root(root, SYSUPGRADE, {**UCI_ENV, **mode})


def test_a_firmware_upgrade_stops_the_service_then_snapshots_into_the_list(root):
    result = sysupgrade(root)

    assert result.returncode == 0, result.stderr
    assert calls(root) == ["kill qlshadow",
                           "qlshadow --config /etc/qlshadow/qlshadow.conf backup "
                           "--keep-list /tmp/sysupgrade.conffiles"]


def test_a_backup_snapshots_without_stopping_and_prints_nothing_into_the_archive(root):
    # sysupgrade -b - writes the archive to stdout: the hook must not add a byte to it.
    result = sysupgrade(root, CONF_BACKUP="-")

    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert calls(root) == ["qlshadow --config /etc/qlshadow/qlshadow.conf backup "
                           "--keep-list /tmp/sysupgrade.conffiles"]


def test_the_keep_list_names_the_settings_and_the_data_dir_but_never_the_live_database():
    with open(os.path.join(OPENWRT, "keep.d"), encoding="utf-8") as fh:
        kept = [line for line in fh.read().splitlines() if line and not line.startswith("#")]

    assert {"/etc/config/qlshadow", "/etc/qlshadow/", "/srv/qlshadow/token.json",
            "/srv/qlshadow/runner-token.json", "/srv/qlshadow/runner.env"} <= set(kept)
    assert not [path for path in kept if "qlshadow.db" in path or path == "/srv/qlshadow/"]


def test_every_openwrt_file_is_installed_by_the_package():
    with open(os.path.join(OPENWRT, "files.txt"), encoding="utf-8") as fh:
        rows = [line.split() for line in fh.read().splitlines() if line.strip()]

    assert ["conf/openwrt/keep.d", "/lib/upgrade/keep.d/qlshadow", "0644"] in rows
    assert ["conf/openwrt/sysupgrade.sh", "/lib/upgrade/qlshadow.sh", "0644"] in rows


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("script", ["postinst", "prerm", "sysupgrade.sh"])
def test_the_scripts_parse_under_every_shell(shell, script):
    result = subprocess.run([*SHELLS[shell], "-n", os.path.join(OPENWRT, script)],
                            capture_output=True, text=True)

    assert result.returncode == 0, result.stderr
