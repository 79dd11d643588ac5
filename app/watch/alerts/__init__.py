"""The alert tick, every minute from the crontab block's own line (shell/tick.sh): in the
running service, in its sender's thread (service_tick.py, sender.py), or, when the service does not
answer, as `qlshadow notify` in a process of its own (which reports the outage, outage.py).
Either way sending never delays a callback (tick_steps.py runs the steps in order):

0. **Hosts** of a fleet going silent and coming back, told once for the fleet (hosts.py).
1. **Find** what the schedule says and no callback can (finding.py): crons that missed a
   firing or are stuck (watch/health/), and a missed or stuck cron that is ok again without a
   finish saying so. Each change is recorded as the callback records its own
   (events.record_if, a compare-and-set on crons.alert_state), so two ticks never record
   one change twice.
2. **Queue** new events (queueing.py): one delivery row per configured channel, in a short
   transaction that marks the event queued only if it still was new (the first tick to get
   there wins). An event older than MAX_EVENT_AGE when first queued is marked too old and
   not sent.
3. **Send** due deliveries one at a time (delivery.py, the words from wording.py): claim (a
   compare-and-set that takes a lease), send outside any transaction, record the outcome. A
   failed send is tried again on a later tick, after RETRY_AFTER, up to MAX_ATTEMPTS in all,
   then given up. A tick that dies while sending leaves its claim to lapse, and a later tick
   sends again: a message may come twice then, never zero times.
4. **Prune** events older than the retention (QL_RETENTION_DAYS) with their deliveries
   (records.py, which also reads the notification log and the figures of /metrics).

With no channel configured the command returns before it opens the database. An idle
tick (nothing changed) reads the crons' health and two empty partial indexes and writes
nothing (docs/ALERTS.md measures it).
"""
from qlshadow.watch.alerts.delivery import (CLAIM_MARGIN, MAX_ATTEMPTS, NOT_CONFIGURED, RETRY_AFTER,
                                            SENDS_PER_TICK, deliver)
from qlshadow.watch.alerts.finding import FIRINGS_FILE, find_changes
from qlshadow.watch.alerts.hosts import host_changes
from qlshadow.watch.alerts.queueing import MAX_EVENT_AGE, failures_in_a_row, queue_events
from qlshadow.watch.alerts.records import DELAY_BUCKETS, counts_by_channel, delays, notify_log, prune
from qlshadow.watch.alerts.tick_steps import tick
from qlshadow.watch.alerts.wording import log_tail, message

__all__ = ["CLAIM_MARGIN", "DELAY_BUCKETS", "FIRINGS_FILE", "MAX_ATTEMPTS", "MAX_EVENT_AGE",
           "NOT_CONFIGURED", "RETRY_AFTER", "SENDS_PER_TICK", "counts_by_channel", "deliver",
           "delays", "failures_in_a_row", "find_changes", "host_changes", "log_tail", "message",
           "notify_log", "prune", "queue_events", "tick"]
