#!/bin/sh
# Build the OpenWrt 24.10 package for opkg: OUT_DIR/qlshadow_<version>-r<release>_all.ipk.
#
#   scripts/build-ipk.sh [OUT_DIR]        (default OUT_DIR: dist/)    --help: the options
#
# A thin front of scripts/pkgbuild (python -m pkgbuild ipk), run by $PYTHON (default
# .venv/bin/python, else python3), which must hold the library versions that
# conf/openwrt/bundled.txt pins. QL_PACKAGE_RELEASE (default 1) is the package
# release; SOURCE_DATE_EPOCH (default: the last commit) dates every file. No network is used.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${PYTHON:-}" ]; then
	if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
PYTHONPATH=$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH
exec "$PYTHON" -m pkgbuild ipk "$@"
