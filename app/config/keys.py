"""The keys the service and the notification tick read, and the values some of them may
take."""
from __future__ import annotations

KNOWN_ORIGINS = frozenset({"manual", "scheduled_node", "scheduled_system"})
SCHEDULERS = ("system", "node")
# SQLite's synchronous levels we offer (docs/RELIABILITY.md, "Power cuts"): full keeps every
# answered callback across a power cut, normal fsyncs only at checkpoints.
SQLITE_SYNCHRONOUS = ("full", "normal")
# The languages of the page, health and gate reasons and notifications (app/i18n.py).
LANGUAGES = ("en", "zh_CN")

# Keys the config file may hold. QL_EXECUTION_ORIGIN is set by crontab lines for the shell,
# never read by the service; QL_BASE_URL and QL_CALLBACK_TIMEOUT are settings the service
# passes on to the shell on every crontab line and manual run.
FILE_KEYS = frozenset({
    "QL_DATA_DIR", "QL_DB_URL", "QL_HOST", "QL_PORT", "QL_THREADS", "QL_SCHEDULER",
    "QL_CRONTAB_FILE", "QL_CRONTAB_INSTALL", "QL_CRONTAB_LIST", "QL3_SHADOW_ORIGINS",
    "QL3_SHADOW_FAILURE_CAP", "QL_MAX_BODY", "QL_BASE_URL", "QL_CALLBACK_TIMEOUT", "QL_DB_TIMEOUT",
    "QL_RETENTION_DAYS", "QL_RETENTION_ROWS_PER_CRON", "QL_RETENTION_LOGS_PER_CRON",
    "QL_RETENTION_LOG_DAYS", "QL_SQLITE_SYNCHRONOUS", "QL_STORAGE_BUDGET", "QL_PAGE_HOSTS",
    "QL_SCRIPTS_DIR", "QL_ENV_FILE",
    "QL_LANG", "QL_HOST_NAME",
})

# Notification settings (docs/NOTIFY.md), read by qlshadow.watch.notify only, never by the
# service: QingLong's own variable names, so an operator's existing values work unchanged,
# plus our overrides of the channels' public addresses, the send timeout and the path of
# a QingLong config.sh to read them from.
NOTIFY_KEYS = frozenset({
    "QL_NOTIFY_TIMEOUT", "QL_NOTIFY_FILE", "SKIP_PUSH_TITLE",
    "WEBHOOK_URL", "WEBHOOK_METHOD", "WEBHOOK_CONTENT_TYPE", "WEBHOOK_BODY", "WEBHOOK_HEADERS",
    "NTFY_URL", "NTFY_TOPIC", "NTFY_PRIORITY", "NTFY_TOKEN", "NTFY_USERNAME", "NTFY_PASSWORD",
    "NTFY_ACTIONS",
    "GOTIFY_URL", "GOTIFY_TOKEN", "GOTIFY_PRIORITY",
    "BARK_PUSH", "BARK_ARCHIVE", "BARK_GROUP", "BARK_SOUND", "BARK_ICON", "BARK_LEVEL",
    "BARK_URL", "BARK_ORIGIN",
    "TG_BOT_TOKEN", "TG_USER_ID", "TG_API_HOST", "TG_PROXY_HOST", "TG_PROXY_PORT",
    "TG_PROXY_AUTH",
    "PUSH_KEY", "PUSH_KEY_ORIGIN",
    "PUSH_PLUS_TOKEN", "PUSH_PLUS_USER", "PUSH_PLUS_TEMPLATE", "PUSH_PLUS_CHANNEL",
    "PUSH_PLUS_WEBHOOK", "PUSH_PLUS_CALLBACKURL", "PUSH_PLUS_TO", "PUSH_PLUS_ORIGIN",
    "QYWX_KEY", "QYWX_ORIGIN", "QYWX_AM",
    "DD_BOT_TOKEN", "DD_BOT_SECRET", "DD_BOT_ORIGIN",
    "FSKEY", "FSSECRET", "FSKEY_ORIGIN",
    "SMTP_SERVER", "SMTP_SSL", "SMTP_EMAIL", "SMTP_PASSWORD", "SMTP_NAME",
    "DEER_KEY", "DEER_URL",
    "GOBOT_URL", "GOBOT_QQ", "GOBOT_TOKEN",
    "IGOT_PUSH_KEY", "IGOT_ORIGIN",
    "CHAT_URL", "CHAT_TOKEN",
    "WE_PLUS_BOT_TOKEN", "WE_PLUS_BOT_RECEIVER", "WE_PLUS_BOT_VERSION", "WE_PLUS_BOT_ORIGIN",
    "QMSG_KEY", "QMSG_TYPE", "QMSG_ORIGIN",
    "AIBOTK_KEY", "AIBOTK_TYPE", "AIBOTK_NAME", "AIBOTK_ORIGIN",
    "PUSHME_KEY", "PUSHME_URL",
    "CHRONOCAT_URL", "CHRONOCAT_QQ", "CHRONOCAT_TOKEN",
    "WXPUSHER_APP_TOKEN", "WXPUSHER_TOPIC_IDS", "WXPUSHER_UIDS", "WXPUSHER_ORIGIN",
})
# Variables of QingLong's notify.py that qlshadow reads but does not use: accepted
# wherever they are set (QingLong users carry them along), and named in a note by
# `qlshadow notify --test`.
NOTIFY_UNUSED_KEYS = frozenset({"HITOKOTO", "CONSOLE", "MEDIASABER_HOST", "MEDIASABER_APIKEY"})
# KEY=VALUE lines cannot hold a line break, so in the conf file these values write one as
# the two characters \n (an environment variable or a config.sh holds real line breaks).
NOTIFY_MULTILINE_KEYS = ("WEBHOOK_BODY", "WEBHOOK_HEADERS", "SKIP_PUSH_TITLE")
