#!/bin/sh
# /usr/bin/qlshadow of the OpenWrt package: runs the packaged qlshadow on the system python3
# with the libraries it carries under vendor/ (Flask and its dependencies, peewee, waitress,
# cronsim: the versions it was tested with, whatever the feed ships).
# The library directory is found next to this script, so an unpacked tree works too.
case $0 in
	*/*) here=${0%/*} ;;
	*) here=. ;;
esac
lib=${QL_LIB_DIR:-$here/../lib/qlshadow}
# -B: Python compiles the packaged sources in memory and never writes byte code beside them
# (flash; sources take half the room byte code would). sys.path is extended inside Python
# rather than through PYTHONPATH, which every task a manual run starts would inherit (and
# with it our libraries).
exec "${QL_PYTHON:-python3}" -B -c '
import os, sys
lib = os.path.abspath(sys.argv.pop(1))
sys.path[:0] = [lib, os.path.join(lib, "vendor")]
from qlshadow.cli import main
sys.exit(main())
' "$lib" "$@"
