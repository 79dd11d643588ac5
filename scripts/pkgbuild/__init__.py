"""Build and describe the OpenWrt package of qlshadow."""
