#!/bin/sh
# /usr/bin/qlshadow of the OpenWrt package: runs the packaged app with the bundled
# peewee and waitress (OpenWrt has no package for either) on the system python3.
# The library directory is found next to this script, so an unpacked tree works too.
case $0 in
	*/*) here=${0%/*} ;;
	*) here=. ;;
esac
lib=${QL_LIB_DIR:-$here/../lib/qlshadow}
# The paths go first on sys.path from inside Python, not through PYTHONPATH: the service
# starts manual runs, and their Python tasks must not inherit our modules (an "app"
# package of their own would be shadowed).
exec "${QL_PYTHON:-python3}" -c '
import os, sys
lib = os.path.abspath(sys.argv.pop(1))
sys.path[:0] = [lib, os.path.join(lib, "vendor")]
from app.cli import main
sys.exit(main())
' "$lib" "$@"
