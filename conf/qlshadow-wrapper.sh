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
# sys.path is extended inside Python rather than through PYTHONPATH, which every task a
# manual run starts would inherit (and with it our libraries). qlshadow_boot stands in for
# python3-codecs when it is not installed (see that file).
code='
import os, sys
lib = os.path.abspath(sys.argv.pop(1))
sys.path[:0] = [lib, os.path.join(lib, "vendor")]
import qlshadow_boot
from qlshadow.cli import main
sys.exit(main())
'
# The package ships sources. The byte code Python compiles from them goes to RAM (/tmp is
# tmpfs on OpenWrt), never beside them on flash: the first start after boot compiles, the
# next ones load it. Only a folder this user made is used, since its byte code is run;
# otherwise (or QL_PYCACHE_DIR empty) -B compiles in memory each time and writes nothing.
cache=${QL_PYCACHE_DIR-/tmp/qlshadow-pycache}
if [ -n "$cache" ]; then
	mkdir -m 0700 "$cache" 2>/dev/null
	if [ -d "$cache" ] && [ ! -h "$cache" ] && [ -O "$cache" ]; then
		exec "${QL_PYTHON:-python3}" -X "pycache_prefix=$cache" -c "$code" "$lib" "$@"
	fi
fi
exec "${QL_PYTHON:-python3}" -B -c "$code" "$lib" "$@"
