# qlshadow's part of sysupgrade, installed as /lib/upgrade/qlshadow.sh: /sbin/sysupgrade
# sources every /lib/upgrade/*.sh before it lists the files to keep (keep.d/qlshadow among
# them) and then runs each function named in sysupgrade_init_conffiles with that list.
# Other upgrade steps source these files too: nothing here runs on its own.

# qlshadow_keep_files LIST: snapshot the database with the service's settings and rewrite
# LIST: the data dir's files added, the snapshot in place of the live database files.
qlshadow_keep_files() {
	local init="${QLSHADOW_INIT:-/etc/init.d/qlshadow}"

	[ -x "$init" ] || return 0
	# Flashing (not -b, a backup, nor -l, a listing): stop first, so that no callback is
	# answered after the snapshot only to be lost with the old firmware.
	if [ -z "$CONF_BACKUP" ] && [ "${CONF_BACKUP_LIST:-0}" = 0 ]; then
		"$init" stop
	fi
	"$init" backup "$1" >/dev/null ||
		echo "qlshadow: no database snapshot: its history is not kept (see logread -e qlshadow)" >&2
	return 0
}

append sysupgrade_init_conffiles qlshadow_keep_files
