"""The host: our block of the user's crontab, manual runs, task logs and crond."""
