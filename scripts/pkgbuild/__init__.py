"""Build qlshadow's OpenWrt packages (.ipk for opkg, .apk for apk-tools 3) with the stdlib only."""
