#!/bin/sh
# /usr/bin/qlshadow of the OpenWrt package: runs the packaged qlshadow with the bundled
# peewee and waitress (OpenWrt has no package for either) on the system python3.
# The library directory is found next to this script, so an unpacked tree works too.
case $0 in
	*/*) here=${0%/*} ;;
	*) here=. ;;
esac
lib=${QL_LIB_DIR:-$here/../lib/qlshadow}
# sys.path is extended inside Python rather than through PYTHONPATH, which every task a
# manual run starts would inherit (and with it our bundled peewee and waitress).
exec "${QL_PYTHON:-python3}" -c '
import os, sys
lib = os.path.abspath(sys.argv.pop(1))
sys.path[:0] = [lib, os.path.join(lib, "vendor")]
from qlshadow.cli import main
sys.exit(main())
' "$lib" "$@"
