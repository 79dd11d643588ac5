"""apk v3 packages (the "ADB" format of apk-tools 3.0.2, OpenWrt 25.12's package manager).

write_apk() gives the bytes `apk mkpkg` gives for the same staged tree, info, scripts and
SOURCE_DATE_EPOCH, with owners always root:root; read_apk() reads a package back for tests.
The format is apk-tools' own (doc/apk-v3.5.scd, src/adb.c, src/app_mkpkg.c); notes and
packages made by the real mkpkg are in shared/apk-vectors.

Accepted info keys (mkpkg's --info names):
  name, version, arch          required; name and version are checked as mkpkg checks them
  description, license, origin, maintainer, url      str ("" means absent, as in mkpkg)
  depends, provides, replaces, install-if, recommends
                               list[str], one dependency each: [!]name[op version], op one of
                               = < > <= >= ~; stored sorted by name, exact repeats dropped
  provider-priority            int
Script names: pre-install post-install pre-upgrade post-upgrade pre-deinstall post-deinstall.
The staged tree may hold directories, regular files and symlinks; hard links, devices,
fifos and sockets are refused (mkpkg would record them in ways this writer does not), and
extended attributes are not recorded.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import zlib

_TEXT = {"name": 1, "version": 2, "description": 4, "arch": 5, "license": 6, "origin": 7,
         "maintainer": 8, "url": 9}
_INT = {"provider-priority": 14}
_DEPS = {"depends": 15, "provides": 16, "replaces": 17, "install-if": 18, "recommends": 19}
_FIELDS = sorted({**_TEXT, **_INT, **_DEPS}.items(), key=lambda item: item[1])
INFO_KEYS = frozenset(key for key, _ in _FIELDS)
# The scripts object's fields 2..7 (field 1, "trigger", needs trigger paths: not written).
SCRIPTS = ("pre-install", "post-install", "pre-deinstall", "post-deinstall", "pre-upgrade",
           "post-upgrade")

# apk-tools' src/version.c: digits{.digits}[letter]{_suffix[digits]}[~hex][-rdigits].
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*[a-z]?(?:_(?:alpha|beta|pre|rc|cvs|svn|git|hg|p)[0-9]*)*"
                      r"(?:~[0-9a-f]+)?(?:-r[0-9]+)?")
# A package name starts with an ASCII letter or digit; dependency names may also hold , : / [ ].
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9+._-]*")
_DEPENDENCY = re.compile(r"(!?)([A-Za-z0-9+._,:/\[\]-]+)(?:([<>=~]+)(.*))?", re.S)
_OP_BITS = {"=": 1, "<": 2, ">": 4, "~": 9}  # '~' is fuzzy (8) plus equal
_ANY, _EQUAL, _CONFLICT = 7, 1, 16
# PEP 440 releases, pre-releases and post-releases: what apk_version() can map.
_PEP440 = re.compile(r"([0-9]+(?:\.[0-9]+)*)(?:(a|b|rc)([0-9]+))?(?:\.post([0-9]+))?")
_PRE = {"a": "alpha", "b": "beta", "rc": "rc"}

_NULL = 0
_OFFSET_MAX = 1 << 28       # tags hold payload offsets in 28 bits
_BLOCK_MAX = 0x3FFFFFFF     # larger blocks need the extended header, which is not written
_ADB, _DATA = 0, 2
_CHUNK = 1 << 20


def valid_apk_version(text: str) -> bool:
    """True if apk-tools 3.0.2 accepts text as a package version."""
    return isinstance(text, str) and _VERSION.fullmatch(text) is not None


def apk_version(version: str, release: int) -> str:
    """The apk version for a PEP 440 version and a package release: "0.1.0rc1", 2 -> "0.1.0_rc1-r2"."""
    match = _PEP440.fullmatch(version)
    if not match or isinstance(release, bool) or not isinstance(release, int) or release < 0:
        raise ValueError(f"version {version!r} release {release!r} has no apk form: use N[.N...]"
                         "[aN|bN|rcN][.postN] and a release >= 0 (.devN and +local have none)")
    base, pre, pre_number, post = match.groups()
    text = base
    if pre:
        text += f"_{_PRE[pre]}{pre_number}"
    if post:
        text += f"_p{post}"
    text += f"-r{release}"
    if not valid_apk_version(text):  # pragma: no cover - the pattern above only makes valid ones
        raise ValueError(f"version {version!r} maps to {text!r}, which apk refuses")
    return text


class _Payload:
    """The ADB block's payload as apk's writer lays it out: values appended in call order,
    aligned, and every value whose exact bytes were appended before stored only once."""

    def __init__(self) -> None:
        self.buf = bytearray(8)  # compat 0, version 0, reserved, root tag (set last)
        self.seen: dict[bytes, int] = {}

    def _put(self, data: bytes, align: int, dedup: bool = True) -> int:
        if dedup:
            offset = self.seen.get(data)
            if offset is not None and offset % align == 0:
                return offset
        self.buf += bytes(-len(self.buf) % align)
        offset = len(self.buf)
        if offset + len(data) > _OFFSET_MAX:
            raise ValueError("package metadata is over 256 MiB, more than an apk package can hold")
        self.buf += data
        if dedup:
            self.seen[data] = offset
        return offset

    def blob(self, data: bytes, dedup: bool = True) -> int:
        size = len(data)
        if size == 0:
            return _NULL
        if size < 0x100:
            return 0x80000000 | self._put(bytes([size]) + data, 1, dedup)
        if size < 0x10000:
            return 0x90000000 | self._put(struct.pack("<H", size) + data, 2, dedup)
        return 0xA0000000 | self._put(struct.pack("<I", size) + data, 4, dedup)

    def int(self, value: int) -> int:
        if value < 0x10000000:
            return 0x10000000 | value
        if value < 1 << 32:
            return 0x20000000 | self._put(struct.pack("<I", value), 4)
        return 0x30000000 | self._put(struct.pack("<Q", value), 4)

    def obj(self, slots: list[int]) -> int:
        """An object or list (mkpkg tags both 0xE); one with no set slot is not stored."""
        while slots and slots[-1] == _NULL:
            slots = slots[:-1]
        if not slots:
            return _NULL
        return 0xE0000000 | self._put(struct.pack(f"<{len(slots) + 1}I", len(slots) + 1, *slots), 4)


def _parse_dependency(key: str, text: object) -> tuple[bytes, int, bytes]:
    if not isinstance(text, str):
        raise ValueError(f"info {key!r}: each dependency must be a str, not {text!r}")
    match = _DEPENDENCY.fullmatch(text)
    if not match:
        raise ValueError(f"info {key!r}: {text!r} is not a dependency ([!]name[op version])")
    conflict, name, ops, version = match.groups()
    op = _ANY
    if ops is not None:
        op = 0
        for char in ops:
            op |= _OP_BITS[char]
        if op & 6 == 6 or not valid_apk_version(version):
            raise ValueError(f"info {key!r}: {text!r} needs an operator = < > <= >= ~ "
                             "and a valid apk version")
    if conflict:
        op |= _CONFLICT
    return name.encode(), op, (version or "").encode()


def _dependencies(key: str, value: object) -> list[tuple[bytes, int, bytes]]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"info {key!r} must be a list of dependency strings")
    parsed = [_parse_dependency(key, item) for item in value]
    by_name: dict[bytes, tuple] = {}
    for dep in parsed:
        # apk orders constraints on one name by version comparison; only repeats are kept.
        if by_name.setdefault(dep[0], dep) != dep:
            raise ValueError(f"info {key!r} holds two different constraints on "
                             f"{dep[0].decode()!r}; give one")
    return parsed


def _check_info(info: dict) -> dict:
    if not isinstance(info, dict):
        raise ValueError("info must be a dict of mkpkg --info fields")
    unknown = sorted(set(info) - INFO_KEYS)
    if unknown:
        raise ValueError(f"unknown info key {unknown[0]!r}; accepted: {', '.join(sorted(INFO_KEYS))}")
    for key in ("name", "version", "arch"):
        if not info.get(key):
            raise ValueError(f"info {key!r} is required")
    checked = {}
    for key, value in info.items():
        if key in _TEXT:
            if not isinstance(value, str):
                raise ValueError(f"info {key!r} must be a str")
            checked[key] = value.encode()
        elif key in _INT:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
                raise ValueError(f"info {key!r} must be an int from 0 to 2**32-1")
            checked[key] = value
        else:
            checked[key] = _dependencies(key, value)
    if not _NAME.fullmatch(info["name"]):
        raise ValueError(f"info 'name' {info['name']!r} is not a valid apk package name")
    if not valid_apk_version(info["version"]):
        raise ValueError(f"info 'version' {info['version']!r} is not a valid apk version")
    return checked


def _write_dependencies(p: _Payload, deps: list[tuple[bytes, int, bytes]]) -> int:
    tags = []
    for name, op, version in deps:
        slots = [p.blob(name), _NULL, _NULL]
        if op != _ANY:
            slots[1] = p.blob(version)
            if op != _EQUAL:
                slots[2] = p.int(op)
        tags.append((name, p.obj(slots)))
    kept: list[int] = []
    for _name, tag in sorted(tags, key=lambda item: item[0]):
        if not kept or kept[-1] != tag:
            kept.append(tag)
    return p.obj(kept)


def _tree(p: _Payload, root: bytes, epoch: int) -> tuple[list[int], list, int]:
    """The paths list's directory objects, the files that get DATA blocks as
    (path index, file index, full path, size), and the installed size."""
    subdirs: list[bytes] = []

    def scan(rel: bytes) -> None:
        for name in sorted(os.listdir(os.path.join(root, rel) if rel else root)):
            path = rel + b"/" + name if rel else name
            if stat.S_ISDIR(os.lstat(os.path.join(root, path)).st_mode):
                subdirs.append(path)
                scan(path)

    scan(b"")
    dirs, data, installed = [], [], 0
    for i, rel in enumerate([b""] + sorted(subdirs), 1):
        full_dir = os.path.join(root, rel) if rel else root
        files = []
        for name in sorted(os.listdir(full_dir)):
            full = os.path.join(full_dir, name)
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                continue
            digest = target = b""
            if stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    raise ValueError(f"{os.fsdecode(full)} is a hard link; copy it instead")
                if st.st_size > _BLOCK_MAX - 12:
                    raise ValueError(f"{os.fsdecode(full)} is over 1 GiB")
                digest = _sha256(full)
                installed += st.st_size
                if st.st_size:
                    data.append((i, len(files) + 1, full, st.st_size))
            elif stat.S_ISLNK(st.st_mode):
                target = struct.pack("<H", stat.S_IFLNK) + os.readlink(full)
            else:
                raise ValueError(f"{os.fsdecode(full)} is not a directory, file or symlink")
            name_tag = p.blob(name)
            hash_tag = p.blob(digest)
            target_tag = p.blob(target)
            mtime_tag = p.int(epoch)
            size_tag = p.int(st.st_size)
            acl = p.obj([p.int(st.st_mode & 0o7777), p.blob(b"root"), p.blob(b"root")])
            files.append(p.obj([name_tag, acl, size_tag, mtime_tag, hash_tag, target_tag]))
        name_tag = p.blob(rel)
        mode = os.stat(full_dir).st_mode & 0o7777
        acl = p.obj([p.int(mode), p.blob(b"root"), p.blob(b"root")])
        dirs.append(p.obj([name_tag, acl, p.obj(files)]))
    return dirs, data, installed or 1


def _sha256(path: bytes) -> bytes:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.digest()


def _block(kind: int, payload_size: int) -> bytes:
    return struct.pack("<I", kind << 30 | (4 + payload_size))


def write_apk(out_path: str, root: str | None, info: dict,
              scripts: dict[str, bytes] | None = None, *, epoch: int,
              compression: str = "deflate") -> None:
    """Write the apk v3 package `apk mkpkg` makes from the staged tree root, info and scripts.

    root None is mkpkg without --files: a package of info alone, with no paths at all (not
    the package of an empty tree, which records its root directory)."""
    checked = _check_info(info)
    scripts = scripts or {}
    for key, value in scripts.items():
        if key not in SCRIPTS:
            raise ValueError(f"unknown script {key!r}; accepted: {', '.join(SCRIPTS)}")
        if not isinstance(value, bytes):
            raise ValueError(f"script {key!r} must be bytes")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 1 << 64:
        raise ValueError("epoch must be a SOURCE_DATE_EPOCH: an int >= 0")
    if compression not in ("deflate", "none"):
        raise ValueError("compression must be 'deflate' or 'none'")
    root_b = None if root is None else os.fsencode(root)
    if root_b is not None and not os.path.isdir(root_b):
        raise ValueError(f"staged tree {root!r} is not a directory")

    p = _Payload()
    info_slots = [_NULL] * 21
    for key, field in _FIELDS:
        if key not in checked:
            continue
        value = checked[key]
        if key in _TEXT:
            info_slots[field - 1] = p.blob(value)
        elif key in _INT:
            info_slots[field - 1] = p.int(value)
        else:
            info_slots[field - 1] = _write_dependencies(p, value)
    dirs, data, installed = _tree(p, root_b, epoch) if root_b is not None else ([], [], 0)
    info_slots[11] = p.int(installed)
    info_slots[2] = uid_tag = p.blob(bytes(20), dedup=False)  # the unique id, set below
    info_tag = p.obj(info_slots)
    paths_tag = p.obj(dirs) if root_b is not None else _NULL
    scripts_tag = _NULL
    if scripts:
        scripts_tag = p.obj([_NULL] + [p.blob(scripts.get(key, b"")) for key in SCRIPTS])
    root_tag = p.obj([info_tag, paths_tag, scripts_tag])
    struct.pack_into("<I", p.buf, 4, root_tag)
    uid_at = (uid_tag & 0x0FFFFFFF) + 1
    p.buf[uid_at:uid_at + 20] = hashlib.sha256(p.buf).digest()[:20]

    tmp = f"{out_path}.tmp{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with open(fd, "wb") as out:
            deflate = None
            if compression == "deflate":
                out.write(b"ADBd")
                deflate = zlib.compressobj(9, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY)

            def emit(chunk: bytes) -> None:
                out.write(deflate.compress(chunk) if deflate else chunk)

            emit(b"ADB.pckg" + _block(_ADB, len(p.buf)) + bytes(p.buf) + bytes(-(4 + len(p.buf)) % 8))
            for i, j, full, size in data:
                emit(_block(_DATA, 8 + size) + struct.pack("<II", i, j))
                with open(full, "rb") as f:
                    left = size
                    while left:
                        chunk = f.read(min(left, _CHUNK))
                        if not chunk:
                            raise ValueError(f"{os.fsdecode(full)} changed while being packed")
                        emit(chunk)
                        left -= len(chunk)
                emit(bytes(-(12 + size) % 8))
            if deflate:
                out.write(deflate.flush())
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --- reading ------------------------------------------------------------------------------

_INFO_NAMES = {1: "name", 2: "version", 3: "hashes", 4: "description", 5: "arch", 6: "license",
               7: "origin", 8: "maintainer", 9: "url", 10: "repo-commit", 11: "build-time",
               12: "installed-size", 13: "file-size", 14: "provider-priority", 15: "depends",
               16: "provides", 17: "replaces", 18: "install-if", 19: "recommends", 20: "layer",
               21: "tags"}
_SCRIPT_NAMES = ("trigger",) + SCRIPTS
_OP_TEXT = {1: "=", 2: "<", 3: "<=", 4: ">", 5: ">=", 8: "~", 9: "~", 11: "<~", 13: ">~", 7: ""}


class _Reader:
    def __init__(self, payload: bytes) -> None:
        self.p = payload

    def val(self, tag: int):
        kind, at = tag >> 28, tag & 0x0FFFFFFF
        if tag == _NULL:
            return None
        if kind == 0x1:
            return at
        if kind == 0x2:
            return struct.unpack_from("<I", self.p, at)[0]
        if kind == 0x3:
            return struct.unpack_from("<Q", self.p, at)[0]
        if kind in (0x8, 0x9, 0xA):
            fmt = {0x8: "<B", 0x9: "<H", 0xA: "<I"}[kind]
            size = struct.unpack_from(fmt, self.p, at)[0]
            start = at + struct.calcsize(fmt)
            if start + size > len(self.p):
                raise ValueError("blob past the end of the ADB block")
            return self.p[start:start + size]
        if kind in (0xD, 0xE):
            count = struct.unpack_from("<I", self.p, at)[0]
            return list(struct.unpack_from(f"<{count - 1}I", self.p, at + 4))
        raise ValueError(f"unknown value tag {tag:#010x}")

    def obj(self, tag: int, size: int) -> list[int]:
        slots = self.val(tag) or []
        return (slots + [_NULL] * size)[:size]

    def text(self, tag: int) -> str | None:
        value = self.val(tag)
        return None if value is None else value.decode("utf-8", "surrogateescape")

    def dependency(self, tag: int) -> str:
        name, version, match = (self.val(t) for t in self.obj(tag, 3))
        op = match if match is not None else (_EQUAL if version else _ANY)
        text = "!" if op & _CONFLICT else ""
        text += name.decode()
        if version:
            text += _OP_TEXT.get(op & ~_CONFLICT, "?") + version.decode()
        return text


def read_apk(path: str) -> dict:
    """Read a package: {"info": {...}, "scripts": {name: bytes}, "entries": [...]}, checking
    every file against its hash and the unique id against the metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    stream = zlib.decompress(raw[4:], -15) if raw[:4] == b"ADBd" else raw
    if stream[:8] != b"ADB.pckg":
        raise ValueError(f"{path} is not an apk v3 package")
    at, payload, data = 8, None, {}
    while at < len(stream):
        word = struct.unpack_from("<I", stream, at)[0]
        kind, size = word >> 30, word & _BLOCK_MAX
        if size < 4 or at + size > len(stream):
            raise ValueError(f"{path}: bad block at {at}")
        body = stream[at + 4:at + size]
        if kind == _ADB and payload is None:
            payload = body
        elif kind == _DATA:
            i, j = struct.unpack_from("<II", body)
            data[i, j] = body[8:]
        elif kind != 1:  # 1: a signature, not checked here
            raise ValueError(f"{path}: unexpected block type {kind}")
        at += size + (-size % 8)
    if payload is None:
        raise ValueError(f"{path} has no ADB block")
    r = _Reader(payload)
    info_tag, paths_tag, scripts_tag = r.obj(struct.unpack_from("<I", payload, 4)[0], 3)

    info, info_slots = {}, r.obj(info_tag, 21)
    for field, tag in enumerate(info_slots, 1):
        if tag == _NULL:
            continue
        key = _INFO_NAMES[field]
        if key in _DEPS:
            info[key] = [r.dependency(t) for t in r.val(tag)]
        elif key == "tags":
            info[key] = [r.text(t) for t in r.val(tag)]
        elif key in ("hashes", "repo-commit"):
            info[key] = r.val(tag).hex()
        elif tag >> 28 in (1, 2, 3):
            info[key] = r.val(tag)
        else:
            info[key] = r.text(tag)
    uid, uid_at = r.val(info_slots[2]) or b"", (info_slots[2] & 0x0FFFFFFF) + 1
    zeroed = payload[:uid_at] + bytes(20) + payload[uid_at + 20:]
    if len(uid) != 20 or hashlib.sha256(zeroed).digest()[:20] != uid:
        raise ValueError(f"{path}: the unique id does not match the metadata")

    scripts = {}
    for field, tag in enumerate(r.obj(scripts_tag, 7), 1):
        if tag != _NULL:
            scripts[_SCRIPT_NAMES[field - 1]] = r.val(tag)
    entries = []
    for i, dir_tag in enumerate(r.val(paths_tag) or [], 1):
        name_tag, acl_tag, files_tag = r.obj(dir_tag, 3)
        dir_name = r.text(name_tag) or ""
        entries.append(_entry(r, dir_name, "dir", acl_tag))
        for j, file_tag in enumerate(r.val(files_tag) or [], 1):
            name, acl, size, mtime, digest, target = r.obj(file_tag, 6)
            file_path = f"{dir_name}/{r.text(name)}" if dir_name else r.text(name)
            entry = _entry(r, file_path, "file", acl, size=r.val(size), mtime=r.val(mtime))
            if target != _NULL:
                target_bytes = r.val(target)
                file_type = struct.unpack_from("<H", target_bytes)[0]
                entry["type"] = "symlink" if file_type == stat.S_IFLNK else "other"
                entry["target"] = target_bytes[2:].decode("utf-8", "surrogateescape")
            else:
                content = data.pop((i, j), b"")
                if len(content) != entry["size"] or hashlib.sha256(content).digest() != r.val(digest):
                    raise ValueError(f"{path}: {file_path} does not match its size or hash")
                entry["data"] = content
            entries.append(entry)
    if data:
        raise ValueError(f"{path}: DATA blocks for no file: {sorted(data)}")
    return {"info": info, "scripts": scripts, "entries": entries}


def _entry(r: _Reader, path: str, kind: str, acl_tag: int, **extra) -> dict:
    mode, user, group = r.obj(acl_tag, 3)
    entry = {"path": path, "type": kind, "mode": r.val(mode), "user": r.text(user),
             "group": r.text(group), "size": None, "mtime": None, "target": None, "data": None}
    entry.update(extra)
    return entry
