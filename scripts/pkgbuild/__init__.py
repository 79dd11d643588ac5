"""Build qlshadow's OpenWrt packages (.ipk for opkg on 24.10, .apk for apk-tools 3 on 25.12).

One staging of the files (stage.py, from conf/openwrt/files.txt and bundled.txt) and one
writer per package format (ipk.py, apk.py); `python -m pkgbuild --help` from scripts/.
Standard library only.
"""
