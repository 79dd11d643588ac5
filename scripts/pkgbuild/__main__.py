"""Build qlshadow's OpenWrt package: `python -m pkgbuild ipk|apk [OUT_DIR]` (scripts/ on the path).

  ipk   OpenWrt 24.10 (Python 3.11), opkg: OUT_DIR/qlshadow_<version>_all.ipk
  apk   OpenWrt 25.12 (Python 3.13), apk-tools 3: OUT_DIR/qlshadow-<version>.apk

The version is app/__init__.py's plus "-r" and QL_PACKAGE_RELEASE (default 1), so an upgrade
of the same version can be built. SOURCE_DATE_EPOCH (default: the last commit's time) dates
every file: the same sources give the same bytes. QL_PKGBUILD_CACHE, if set, is a folder that
keeps each compacted source for the next builds (the test suite sets one per run). Prints
the package's path.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

from . import ipk, stage

RELEASE_OF = {"ipk": "24.10", "apk": "25.12"}
SUMMARY = "Cron status service for QingLong-style panels beside system crond."
DESCRIPTION = """\
Keeps the 2.x task status that jobs run by crond report over HTTP and, when
enabled, records every crond execution exactly once as a Shadow Run. Carries
the pure-Python Flask, Werkzeug, Jinja2, MarkupSafe, itsdangerous, click,
blinker, peewee, waitress and cronsim it is tested with."""
MAINTAINER = "qlshadow maintainers"
URL = "https://github.com/qlshadow/qlshadow"


def package_release() -> int:
    """QL_PACKAGE_RELEASE, the package's own release number (default 1)."""
    text = os.environ.get("QL_PACKAGE_RELEASE", "") or "1"
    if not text.isdigit():
        raise stage.BuildError(f"QL_PACKAGE_RELEASE must be a whole number, not {text!r}")
    return int(text)


def source_date_epoch() -> int:
    """SOURCE_DATE_EPOCH, else the last commit's time, else 1980-01-01."""
    text = os.environ.get("SOURCE_DATE_EPOCH", "")
    if text:
        if not text.isdigit():
            raise stage.BuildError(f"SOURCE_DATE_EPOCH must be seconds since 1970, not {text!r}")
        return int(text)
    done = subprocess.run(["git", "-C", stage.ROOT, "log", "-1", "--format=%ct"],
                          capture_output=True, text=True)
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else 315532800


def _part(name: str) -> bytes:
    with open(os.path.join(stage.SCRIPTS_DIR, name), "rb") as fh:
        return fh.read()


def _body(script: bytes) -> bytes:
    """A script without its #! line, to inline it as package-pack.mk does for apk."""
    return b"".join(line for line in script.splitlines(keepends=True)
                    if not line.lstrip().startswith(b"#!"))


def apk_scripts(postinst: bytes, prerm: bytes) -> dict:
    """post-install, post-upgrade and pre-deinstall as OpenWrt's apk packages have them: the
    functions.sh preamble and default_postinst/default_prerm, then the package's part."""
    preamble = (b'[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0\n'
                b'. ${IPKG_INSTROOT}/lib/functions.sh\n'
                b'export root="${IPKG_INSTROOT}"\n'
                b'export pkgname="' + stage.NAME.encode() + b'"\n')
    install = (b'#!/bin/sh\n[ "${IPKG_NO_SCRIPT}" = "1" ] && exit 0\n' + preamble
               + b"add_group_and_user\ndefault_postinst\n" + _body(postinst))
    return {"post-install": install,
            "post-upgrade": b"#!/bin/sh\nexport PKG_UPGRADE=1\n" + _body(install),
            "pre-deinstall": b"#!/bin/sh\n" + preamble + b"default_prerm\n" + _body(prerm)}


def add_apk_records(tree: str, conffiles: list) -> None:
    """lib/apk/packages/qlshadow.{list,conffiles,conffiles_static}, as package-pack.mk writes
    them: the list of every file (taken before these are added), the conffiles, and each
    conffile with its sha256 (apk keeps an edited one on upgrade)."""
    listed = []
    for folder, _, names in os.walk(tree):
        listed += ["/" + os.path.relpath(os.path.join(folder, n), tree) for n in names]
    records = os.path.join(tree, "lib", "apk", "packages")
    os.makedirs(records, exist_ok=True)
    static = []
    for path in conffiles:
        with open(tree + path, "rb") as fh:
            static.append(f"{path} {hashlib.sha256(fh.read()).hexdigest()}\n")
    for suffix, lines in (("list", [p + "\n" for p in sorted(listed)]),
                          ("conffiles", [p + "\n" for p in conffiles]),
                          ("conffiles_static", static)):
        path = os.path.join(records, f"{stage.NAME}.{suffix}")
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(lines)
        os.chmod(path, 0o644)
    for folder in (os.path.join(tree, "lib"), os.path.join(tree, "lib", "apk"), records):
        os.chmod(folder, 0o755)


def build(kind: str, out_dir: str) -> str:
    """Stage and write one package; its path."""
    release = RELEASE_OF[kind]
    version = stage.package_version(stage.app_version(), package_release())
    epoch = source_date_epoch()
    depends = stage.depends(release)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        tree = os.path.join(work, "root")
        os.mkdir(tree)
        staged = stage.stage(tree, release)
        postinst, prerm = _part("postinst"), _part("prerm")
        if kind == "ipk":
            fields = {"Package": stage.NAME, "Version": version, "Depends": ", ".join(depends),
                      "License": "MIT", "Section": "utils", "URL": URL,
                      "Maintainer": MAINTAINER, "Architecture": "all"}
            return ipk.write_ipk(os.path.join(out_dir, f"{stage.NAME}_{version}_all.ipk"), tree,
                                 fields, SUMMARY + "\n" + DESCRIPTION, conffiles=staged.conffiles,
                                 postinst=postinst, prerm=prerm, epoch=epoch)
        from .apk import write_apk

        add_apk_records(tree, staged.conffiles)
        info = {"name": stage.NAME, "version": version,
                "description": SUMMARY + " " + " ".join(DESCRIPTION.split()),
                "arch": "noarch", "license": "MIT", "origin": stage.NAME, "url": URL,
                "maintainer": MAINTAINER, "depends": depends}
        out = os.path.join(out_dir, f"{stage.NAME}-{version}.apk")
        write_apk(out + ".tmp", tree, info, apk_scripts(postinst, prerm), epoch=epoch)
        os.replace(out + ".tmp", out)
        return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pkgbuild", description=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=sorted(RELEASE_OF), help="ipk (24.10) or apk (25.12)")
    parser.add_argument("out_dir", nargs="?", default=os.path.join(stage.ROOT, "dist"),
                        help="where the package goes (default: dist/)")
    args = parser.parse_args(argv)
    try:
        print(build(args.kind, args.out_dir))
    except stage.BuildError as exc:
        print(f"build-{args.kind}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
