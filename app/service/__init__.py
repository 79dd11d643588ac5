"""Services: cron changes (the one place that opens a transaction and installs the
crontab), adoption of an existing crontab and import from QingLong."""
