#!/bin/sh
# Build dist/qlshadow_<version>_all.ipk the way OpenWrt's ipkg-build lays a package out:
# a gzipped tar of ./debian-binary ("2.0"), ./data.tar.gz and ./control.tar.gz.
#
#   scripts/build-ipk.sh [OUT_DIR]          (default OUT_DIR: dist/)
#
# OpenWrt ships python3 and python3-flask but no peewee, waitress or cronsim package, so
# these (pure Python; cronsim only for `qlshadow reconcile`) are bundled under
# /usr/lib/qlshadow/vendor, copied from the Python that
# runs this script ($PYTHON, default .venv/bin/python, else python3). No network is used.
#
# Reproducible: the same sources and the same bundled versions give the same bytes.
# Every mtime is SOURCE_DATE_EPOCH (default: the last git commit, else a constant),
# owners are 0:0, names are sorted, gzip stores no name or time. Needs GNU tar.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${1:-$ROOT/dist}
if [ -z "${PYTHON:-}" ]; then
	if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
MAINTAINER=${IPK_MAINTAINER:-qlshadow maintainers}
export LC_ALL=C TZ=UTC

die() {
	echo "build-ipk: $*" >&2
	exit 1
}

tar --version 2>/dev/null | grep -q 'GNU tar' || die "GNU tar is needed (for --sort=name)"

VERSION=$(sed -n 's/^__version__ = "\([^"]*\)"$/\1/p' "$ROOT/app/__init__.py")
[ -n "$VERSION" ] || die "no __version__ in app/__init__.py"

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || true)
	# Outside a git checkout: a fixed date (1980-01-01, the oldest a zip can hold).
	[ -n "$SOURCE_DATE_EPOCH" ] || SOURCE_DATE_EPOCH=315532800
fi

# Runtime dependencies on OpenWrt, where the standard library is split into packages.
# Found by importing everything `qlshadow serve` loads and answering every endpoint:
#   python3-light    the interpreter and the unsplit stdlib (json, hashlib, http, socket,
#                    threading, argparse ...); the full "python3" would also pull in
#                    what we never import (ncurses, lzma, asyncio, xml, ...)
#   python3-flask    Flask with werkzeug, jinja2, itsdangerous, click, blinker
#   python3-sqlite3  the default SQLite backend
#   python3-logging  app, flask, peewee and waitress all log
#   python3-email    http.client (loaded by werkzeug) parses headers with email
#   python3-urllib   urllib.parse: werkzeug and our database URL parsing
#   python3-codecs   unicodedata (werkzeug.utils, the idna codec)
#   python3-decimal  peewee imports decimal at load time
#   python3-uuid     peewee imports uuid at load time
# Not needed: python3-openssl (hashlib/hmac fall back to the built-in SHA-256; http
# .client imports ssl only if present), python3-lzma/bz2 (optional in shutil).
# PostgreSQL from a router would also need psycopg2 for the router's python3.
DEPENDS="python3-light, python3-flask, python3-sqlite3, python3-logging, python3-email, python3-urllib, python3-codecs, python3-decimal, python3-uuid"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
trap 'exit 1' INT TERM
DATA=$WORK/data
CONTROL=$WORK/control
LIB=$DATA/usr/lib/qlshadow
mkdir -p "$CONTROL" "$LIB/vendor" "$LIB/shell" "$DATA/usr/bin" "$DATA/etc/init.d" \
	"$DATA/etc/config" "$DATA/etc/qlshadow"

# The Python package: only *.py sources (no __pycache__, no editor leftovers), from the
# source folder app/ into the import name qlshadow/.
(cd "$ROOT/app" && find . -type f -name '*.py') | while read -r file; do
	file=${file#./}
	mkdir -p "$LIB/qlshadow/$(dirname "$file")"
	cp "$ROOT/app/$file" "$LIB/qlshadow/$file"
done

# The status page's templates, read from the package at run time.
mkdir -p "$LIB/qlshadow/templates"
for file in "$ROOT"/app/templates/*.html; do
	if [ -f "$file" ]; then cp "$file" "$LIB/qlshadow/templates/"; fi
done

# The shell scripts: whatever shell/*.sh exists at build time.
for file in "$ROOT"/shell/*.sh; do
	if [ -f "$file" ]; then cp "$file" "$LIB/shell/"; fi
done

# Bundled peewee, waitress and cronsim with their licences, copied from $PYTHON's install.
"$PYTHON" - "$LIB/vendor" <<'PY' || die "cannot bundle peewee, waitress and cronsim from $PYTHON"
import os, shutil, sys
from importlib import metadata

import cronsim
import peewee
import waitress

target = sys.argv[1]
shutil.copyfile(peewee.__file__, os.path.join(target, "peewee.py"))
for package in (waitress, cronsim):
    shutil.copytree(os.path.dirname(package.__file__), os.path.join(target, package.__name__),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))
versions = []
for name in ("peewee", "waitress", "cronsim"):
    dist = metadata.distribution(name)
    versions.append(f"{name} {dist.version}\n")
    licences = [f for f in dist.files or () if os.path.basename(str(f)).startswith(("LICENSE", "COPYING"))]
    if not licences:
        sys.exit(f"no licence file found for {name}")
    shutil.copyfile(dist.locate_file(licences[0]), os.path.join(target, f"LICENSE.{name}"))
    # Its metadata too, so importlib.metadata finds the bundled version (serve checks
    # waitress's against the range its callback lane was tested with).
    info = os.path.join(target, f"{name}-{dist.version}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as fh:
        fh.write(dist.read_text("METADATA") or f"Name: {name}\nVersion: {dist.version}\n")
with open(os.path.join(target, "VERSIONS"), "w") as fh:
    fh.writelines(versions)
PY

cp "$ROOT/scripts/smoke.sh" "$LIB/smoke.sh"
cp "$ROOT/conf/qlshadow-wrapper.sh" "$DATA/usr/bin/qlshadow"
cp "$ROOT/conf/qlshadow.init" "$DATA/etc/init.d/qlshadow"
cp "$ROOT/conf/qlshadow.uci" "$DATA/etc/config/qlshadow"
# Data on OpenWrt: /srv/qlshadow on the flash overlay. /var and /tmp are RAM there (lost
# at reboot, and with them every status and Run); the writes are few and small.
sed 's|^QL_DATA_DIR=.*|QL_DATA_DIR=/srv/qlshadow|' "$ROOT/conf/qlshadow.conf" \
	> "$DATA/etc/qlshadow/qlshadow.conf"
grep -q '^QL_DATA_DIR=/srv/qlshadow$' "$DATA/etc/qlshadow/qlshadow.conf" \
	|| die "conf/qlshadow.conf has no QL_DATA_DIR line to set"

# Modes are set, not inherited from the umask or the checkout.
find "$DATA" -type d -exec chmod 0755 {} +
find "$DATA" -type f -exec chmod 0644 {} +
chmod 0755 "$DATA/usr/bin/qlshadow" "$DATA/etc/init.d/qlshadow" "$LIB/smoke.sh"
for file in "$LIB"/shell/*.sh; do
	if [ -f "$file" ]; then chmod 0755 "$file"; fi
done
# May hold a database password.
chmod 0600 "$DATA/etc/qlshadow/qlshadow.conf"

TAR_FLAGS="--format=gnu --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$SOURCE_DATE_EPOCH"
# shellcheck disable=SC2086
(cd "$DATA" && tar $TAR_FLAGS -cf - .) | gzip -n -9 > "$WORK/data.tar.gz"
# As ipkg-build: Installed-Size is the byte size of the unpacked data tar.
INSTALLED_SIZE=$(gzip -dc "$WORK/data.tar.gz" | wc -c | tr -d ' ')

cat > "$CONTROL/control" <<EOF
Package: qlshadow
Version: $VERSION
Depends: $DEPENDS
License: MIT
Section: utils
Architecture: all
Installed-Size: $INSTALLED_SIZE
Maintainer: $MAINTAINER
Description: Cron status service for QingLong-style panels beside system crond.
 Keeps the 2.x task status that jobs run by crond report over HTTP and, when
 enabled, records every crond execution exactly once as a Shadow Run. Bundles
 peewee, waitress and cronsim (pure Python).
EOF
printf '%s\n' /etc/config/qlshadow /etc/qlshadow/qlshadow.conf > "$CONTROL/conffiles"
cp "$ROOT/conf/openwrt/postinst" "$ROOT/conf/openwrt/prerm" "$CONTROL/"
chmod 0755 "$CONTROL" "$CONTROL/postinst" "$CONTROL/prerm"
chmod 0644 "$CONTROL/control" "$CONTROL/conffiles"
# shellcheck disable=SC2086
(cd "$CONTROL" && tar $TAR_FLAGS -cf - .) | gzip -n -9 > "$WORK/control.tar.gz"

printf '2.0\n' > "$WORK/debian-binary"
chmod 0644 "$WORK/debian-binary" "$WORK/data.tar.gz" "$WORK/control.tar.gz"
mkdir -p "$OUT_DIR"
PKG=$OUT_DIR/qlshadow_${VERSION}_all.ipk
# shellcheck disable=SC2086
(cd "$WORK" && tar $TAR_FLAGS -cf - ./debian-binary ./data.tar.gz ./control.tar.gz) \
	| gzip -n -9 > "$PKG.tmp"
mv "$PKG.tmp" "$PKG"
echo "$PKG"
