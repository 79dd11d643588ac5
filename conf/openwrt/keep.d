# qlshadow: kept over a firmware upgrade (sysupgrade) and in a configuration backup
# (sysupgrade -b). These are the settings and the data dir's small files at the package's
# default place. /lib/upgrade/qlshadow.sh then adds the data dir wherever it is configured
# and a consistent snapshot of the database (qlshadow.db.snapshot), and takes the live
# database, its WAL and shared memory out of the list: a copy of those is torn.
/etc/config/qlshadow
/etc/qlshadow/
/srv/qlshadow/token.json
/srv/qlshadow/runner-token.json
/srv/qlshadow/runner.env
/srv/qlshadow/runner.conf
/srv/qlshadow/crontab.list
/srv/qlshadow/crontab-settings.json
/srv/qlshadow/notify.conf
/srv/qlshadow/notify-firings.json
/srv/qlshadow/log/
