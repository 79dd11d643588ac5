"""What the status page shows, read from the tables (no Flask): bounded, read-only queries.

Times stay epoch seconds here; the page turns them into text in the viewer's chosen zone.
The crons list and a cron's summary (crons.py) with its strip of executions and firings
without a record (strip.py) and its schedule in words (schedule_text.py); one cron's
executions, a task log's tail and accept failures (executions.py); the health page's rows
and the alert log (health_page.py).

The names the page uses are imported here from the module that holds them.
"""
from __future__ import annotations

from qlshadow.web.overview.crons import cron_detail, cron_rows
from qlshadow.web.overview.executions import LOG_BYTES, cron_executions, cron_failures, log_tail
from qlshadow.web.overview.health_page import health_rows, notification_log, size_text
from qlshadow.web.overview.schedule_text import describe_schedule
from qlshadow.web.overview.strip import STRIP

__all__ = ["LOG_BYTES", "STRIP", "cron_detail", "cron_executions", "cron_failures", "cron_rows",
           "describe_schedule", "health_rows", "log_tail", "notification_log", "size_text"]
