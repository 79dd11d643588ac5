"""Write an .ipk as OpenWrt 24.10's ipkg-build lays one out, for opkg.

The package is a gzipped tar of ./debian-binary ("2.0"), ./data.tar.gz (the staged tree) and
./control.tar.gz (control, conffiles and the maintainer scripts). Reproducible: every mtime
is the given epoch, owners are root (0:0), names sorted, gzip stores no name or time.
"""
from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile


def _tar_gz(members: list, epoch: int) -> bytes:
    """A gzip -9 -n tar of (name, mode, bytes or None for a directory) in the order given."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, mode, data in members:
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = epoch, mode
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def tree_members(tree: str) -> list:
    """The staged tree as tar members, "./" first, each directory before what it holds."""
    members = [("./", 0o755, None)]
    for folder, dirs, names in os.walk(tree):
        dirs.sort()
        rel = os.path.relpath(folder, tree)
        prefix = "./" if rel == "." else f"./{rel}/"
        for name in sorted(dirs + names):
            path = os.path.join(folder, name)
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if os.path.islink(path) or not (os.path.isdir(path) or os.path.isfile(path)):
                raise ValueError(f"{path}: only files and directories are packaged")
            if os.path.isdir(path):
                members.append((prefix + name + "/", mode, None))
            else:
                with open(path, "rb") as fh:
                    members.append((prefix + name, mode, fh.read()))
    # os.walk visits a folder's files after all its subfolders were listed at its level;
    # GNU tar's --sort=name order is a depth-first walk: sort by path components.
    return [members[0]] + sorted(members[1:], key=lambda m: m[0].rstrip("/").split("/"))


def postinst_wrapper() -> bytes:
    """The generic postinst OpenWrt puts in every package: default_postinst from
    /lib/functions.sh, which runs the package's own postinst-pkg and starts its init scripts."""
    return (b'#!/bin/sh\n'
            b'[ "${IPKG_NO_SCRIPT}" = "1" ] && exit 0\n'
            b'[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0\n'
            b'. ${IPKG_INSTROOT}/lib/functions.sh\n'
            b'default_postinst $0 $@\n')


def prerm_wrapper() -> bytes:
    """The generic prerm: default_prerm runs prerm-pkg, then stops and disables init scripts."""
    return (b'#!/bin/sh\n'
            b'[ -s ${IPKG_INSTROOT}/lib/functions.sh ] || exit 0\n'
            b'. ${IPKG_INSTROOT}/lib/functions.sh\n'
            b'default_prerm $0 $@\n')


def control_text(fields: dict, description: str) -> str:
    """The control file: fields in the order given, then the folded Description."""
    lines = [f"{key}: {value}" for key, value in fields.items() if value]
    first, *rest = description.strip().splitlines()
    lines.append(f"Description: {first}")
    lines += [" " + line.strip() for line in rest]
    return "\n".join(lines) + "\n"


def write_ipk(out_path: str, tree: str, fields: dict, description: str, *, conffiles: list,
              postinst: bytes, prerm: bytes, epoch: int) -> str:
    """Write the .ipk of a staged tree; postinst and prerm are the package's own parts."""
    data = _tar_gz(tree_members(tree), epoch)
    # As ipkg-build: Installed-Size is the byte size of the unpacked data tar.
    fields = {**fields, "Installed-Size": str(len(gzip.decompress(data)))}
    control = _tar_gz([
        ("./", 0o755, None),
        ("./conffiles", 0o644, "".join(f"{p}\n" for p in conffiles).encode()),
        ("./control", 0o644, control_text(fields, description).encode()),
        ("./postinst", 0o755, postinst_wrapper()),
        ("./postinst-pkg", 0o755, postinst),
        ("./prerm", 0o755, prerm_wrapper()),
        ("./prerm-pkg", 0o755, prerm),
    ], epoch)
    package = _tar_gz([("./debian-binary", 0o644, b"2.0\n"), ("./data.tar.gz", 0o644, data),
                       ("./control.tar.gz", 0o644, control)], epoch)
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(package)
    os.replace(tmp, out_path)
    return out_path
