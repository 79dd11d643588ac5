"""Database models: crons and their Legacy instances, apps and tokens, Shadow Runs.

Tables are kept few and narrow on purpose: every page a callback touches is a flash write
on a router. Indexes carry a comment naming the query that needs them.
"""
from __future__ import annotations

import threading

from peewee import (AutoField, BigIntegerField, BlobField, CompositeKey, DatabaseProxy,
                    ForeignKeyField, IntegerField, Model, NodeList, SmallIntegerField, SQL,
                    SqliteDatabase, TextField)



class AppDatabase(DatabaseProxy):
    """The models' database: the one this thread's request is for (bind_thread, set around
    each request by the app that owns it), else the process's default (initialize: the
    database opened last, which is the only one for the CLI and a one-app server). So two
    apps over two databases in one process each read and write only their own."""

    __slots__ = ("_default", "_local")

    def __init__(self):
        object.__setattr__(self, "_local", threading.local())
        object.__setattr__(self, "_default", None)
        object.__setattr__(self, "_callbacks", [])

    def __setattr__(self, attr, value):
        object.__setattr__(self, "_default" if attr == "obj" else attr, value)

    @property
    def obj(self):
        bound = getattr(self._local, "db", None)
        return self._default if bound is None else bound

    def bind_thread(self, db):
        """Make db this thread's database (None: the default again); returns the one before."""
        local = self._local
        before = getattr(local, "db", None)
        local.db = db
        return before


database = AppDatabase()

# Cron.status codes (2.x), and the word the page and the CLI show for each
CRON_RUNNING, CRON_IDLE, CRON_DISABLED, CRON_QUEUED = 0, 1, 2, 3
CRON_STATUS = {CRON_RUNNING: "running", CRON_IDLE: "idle", CRON_DISABLED: "disabled",
               CRON_QUEUED: "queued"}


def cron_status_word(status: int) -> str:
    """The word for a Cron.status code (the number itself for a code 2.x does not have)."""
    return CRON_STATUS.get(status, str(status))


# RunningInstance.status codes (2.x)
INSTANCE_RUNNING, INSTANCE_FINISHED, INSTANCE_STOPPED, INSTANCE_ERROR = 0, 1, 2, 3
# ShadowRun.created_running of a Run open when its host rebooted, closed by the first
# opening of the next boot (storage/reboot.py): exited, with no exit code.
LOST_AT_REBOOT = 2


def storable(text: str) -> bool:
    """True when both databases can store the text as given.

    JSON may carry "\\u0000" (PostgreSQL text refuses NUL) and lone surrogates such as
    "\\ud800" (not encodable as UTF-8): either would fail the write with a driver error.
    """
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class BaseModel(Model):
    class Meta:
        database = database
        legacy_table_names = False


class NeverReusedAutoField(AutoField):
    """An id never handed out twice. SQLite reuses the largest deleted rowid unless the key
    is AUTOINCREMENT, and Runs and task identities name crons by id for good."""

    def ddl(self, ctx):
        node = super().ddl(ctx)
        if isinstance(database.obj, SqliteDatabase):
            node = NodeList((node, SQL("AUTOINCREMENT")))
        return node


# A cron's definition: every field its user sets (crons.py checks each). The task revision
# covers exactly these fields (docs/CONTRACT.md §3.6), and the callback reads them back
# with its update (legacy.py). Here, below every module that needs the list.
DEFINITION_FIELDS = ("name", "command", "schedule", "extra_schedules", "task_before",
                     "task_after", "work_dir", "log_name", "allow_multiple_instances")
REQUIRED_FIELDS = ("name", "command", "schedule")


class Cron(BaseModel):
    id = NeverReusedAutoField()
    name = TextField()
    command = TextField()
    schedule = TextField()
    extra_schedules = TextField(null=True)  # JSON list of {"schedule": ...}, as stored
    task_before = TextField(null=True)
    task_after = TextField(null=True)
    work_dir = TextField(null=True)
    log_name = TextField(null=True)
    allow_multiple_instances = SmallIntegerField(default=0)
    status = SmallIntegerField(default=CRON_IDLE)
    pid = BigIntegerField(null=True)
    log_path = TextField(null=True)
    last_execution_time = BigIntegerField(null=True)
    last_running_time = BigIntegerField(null=True)
    is_disabled = SmallIntegerField(default=0)
    created_at = BigIntegerField()
    updated_at = BigIntegerField()
    # Seconds a due firing may go without a record before it counts as missed (watch/health/);
    # null: a default from the schedule. Monitoring only: not part of the task revision.
    # Last, where schema step 2 adds it to an older table.
    grace = IntegerField(null=True)
    # The health state last alerted on (watch/alerts/): "failed", "missed", "stuck", or null/"ok".
    # The callback's Legacy update returns it, so a state change is seen without a read and
    # an event row is written only then. Last, where schema step 4 adds it.
    alert_state = TextField(null=True)
    # Alert tuning (watch/alerts/queueing.py queue_events; schema step 6 adds them, all null for old rows).
    # How the cron is watched, not what it runs: none is a definition field. alert_after:
    # failures in a row before the failed alert is sent (null: 1); max_runtime: seconds
    # after which an open execution is stuck (null: watch/health/'s rule); quiet: recurring
    # quiet hours "HH:MM-HH:MM", local time; snooze_until: no alert is sent before it.
    alert_after = SmallIntegerField(null=True)
    max_runtime = IntegerField(null=True)
    quiet = TextField(null=True)
    snooze_until = BigIntegerField(null=True)
    # The hosts the cron runs on (a fleet sharing one PostgreSQL database): a JSON list of
    # host names, or ["*"] for every host; null reads as ["*"]. hosts_mode "one": exactly one
    # of them runs each firing (claims below); null or "each": every one of them does.
    # Where it runs, not what: not part of the task revision. Last, added by a schema step.
    hosts = TextField(null=True)
    hosts_mode = TextField(null=True)

    class Meta:
        table_name = "crons"


class RunningInstance(BaseModel):
    """One Legacy execution record per running callback (2.x semantics)."""
    id = AutoField()
    cron = ForeignKeyField(Cron, column_name="cron_id", on_delete="CASCADE", index=False)
    pid = BigIntegerField(null=True)
    log_path = TextField(null=True)
    started_at = BigIntegerField()
    finished_at = BigIntegerField(null=True)
    status = SmallIntegerField(default=INSTANCE_RUNNING)
    exit_code = IntegerField(null=True)
    # hosts.id of the host it ran on; null on a database only one host has ever used.
    host_id = IntegerField(null=True)

    class Meta:
        table_name = "running_instances"


# The idle callback closes "instances of this cron with this pid still running". A partial
# index holds only running rows, so it stays one small page instead of growing with history.
RunningInstance.add_index(
    RunningInstance.index(RunningInstance.cron, RunningInstance.pid,
                          where=(RunningInstance.status == INSTANCE_RUNNING),
                          name="running_instances_open"))
# GET /open/crons/<id>/instances and the status page's strips (newest first), the per-cron
# row cap of retention, and the gate's read of a cron's instances (watch/reconcile/ says why no
# (cron_id, started_at) index: one more page written per callback).
RunningInstance.add_index(
    RunningInstance.index(RunningInstance.cron, RunningInstance.id, name="running_instances_cron"))


class App(BaseModel):
    id = AutoField()
    name = TextField(unique=True)
    client_id = TextField(unique=True)
    client_secret_hash = TextField()  # sha256 hex; the plaintext is shown once
    scopes = TextField()  # comma list
    created_at = BigIntegerField()

    class Meta:
        table_name = "apps"


class Token(BaseModel):
    token_hash = TextField(primary_key=True)  # sha256 hex of the bearer token
    app = ForeignKeyField(App, column_name="app_id", on_delete="CASCADE", index=False)
    expiration = BigIntegerField()

    class Meta:
        table_name = "tokens"


class ShadowRun(BaseModel):
    """One Shadow Run with its single Attempt and its events, in one slim row.

    Keyed by (accepted_at, id): the order every Run listing, window and age deletion reads,
    so one B-tree holds the rows and serves admission, replay, state changes and those reads
    (on SQLite WITHOUT ROWID for the same reason). Only what cannot be derived is stored,
    in binary where it is a hash: a Run is written on every callback and kept for weeks on
    a router's flash (docs/STORAGE.md measures the shapes). reader.logical_row rebuilds the
    full Run: the request id (also its idempotency key) from accepted_at and request_uuid,
    the Attempt id from those two, project, task identity and trigger fields from constants,
    the state from finished_at (a Run is "running" until it has one, then "exited": no
    writer stores the states before running), started_at from accepted_at and started_after,
    the events and recorded_at from accepted_at, created_after, created_running and
    finished_at.
    """
    accepted_at = BigIntegerField()
    id = BlobField()  # the run id's 16 bytes: byte order is the text id's order
    request_uuid = BlobField()  # the execution id's UUID, 16 bytes
    cron_id = BigIntegerField()
    task_revision = BlobField()  # sha256 of the definition, 32 bytes
    origin = SmallIntegerField()  # position in shadow.ORIGINS
    pid = BigIntegerField(null=True)
    log_path = TextField(null=True)
    # started_at as seconds after accepted_at: 0, stored in no bytes on SQLite, when task.sh
    # made the execution id from the start second, as it does.
    started_after = BigIntegerField(null=True)
    finished_at = BigIntegerField(null=True)
    exit_code = IntegerField(null=True)
    # Server time of the first callback (its events' time) as seconds after accepted_at:
    # a byte or none on SQLite where the full time takes six.
    created_after = BigIntegerField()  # any pair of times the API takes: 64 bits
    # 1 when the first callback was "running"; 2 as well, and the Run was then closed as
    # lost at a reboot (LOST_AT_REBOOT; it has finished_at and no exit code).
    created_running = SmallIntegerField()
    # hosts.id of the host it ran on (a small integer, a byte or two); null where only one
    # host uses the database (SQLite): nothing stored.
    host_id = IntegerField(null=True)

    class Meta:
        table_name = "shadow_runs"
        primary_key = CompositeKey("accepted_at", "id")


# Runs are listed newest first by run id, and a run id begins with its accepted seconds, so
# ordering by the key (accepted_at, id) is the same order. One index, one more page written
# when a Run is created (never when it advances: its columns never change):
# (cron_id, accepted_at, id): GET /open/runs?cron_id=, the per-cron row cap, and a cron's
# Runs in an accepted_at window (reconciliation).
ShadowRun.add_index(ShadowRun.index(ShadowRun.cron_id, ShadowRun.accepted_at, ShadowRun.id,
                                    name="shadow_runs_cron"))


class ShadowFailure(BaseModel):
    """A refused or failed Shadow admission; bounded to QL3_SHADOW_FAILURE_CAP rows."""
    id = AutoField()
    at = BigIntegerField()
    reason = TextField()
    request_id = TextField(null=True)
    cron_id = BigIntegerField(null=True)
    detail = TextField()

    class Meta:
        table_name = "shadow_failures"


class AlertEvent(BaseModel):
    """A cron's health state changed (failed, ok again, missed, stuck): one row per change,
    written by the callback's transaction or by the `notify` tick (watch/alerts/)."""
    id = AutoField()
    cron = ForeignKeyField(Cron, column_name="cron_id", on_delete="CASCADE", index=False)
    at = BigIntegerField()
    state = TextField()  # the new state: failed, ok, missed, stuck
    previous = TextField(null=True)
    exit_code = IntegerField(null=True)
    log_path = TextField(null=True)  # the execution's log, as its callback sent it
    reason = TextField(null=True)  # the health reason, for states the tick found
    status = SmallIntegerField(default=0)  # 0 new, 1 queued for the channels, 2 too old to send,
    # 3 held back by the alert tuning, 4 folded into a service outage's message (watch/outage.py)

    class Meta:
        table_name = "alert_events"


# The tick's "events not yet queued": a partial index that holds only new rows, so an idle
# tick reads one empty page.
AlertEvent.add_index(AlertEvent.index(AlertEvent.id, where=(AlertEvent.status == 0),
                                      name="alert_events_new"))


class AlertDelivery(BaseModel):
    """One event sent (or being sent) through one channel: the notification log."""
    event = ForeignKeyField(AlertEvent, column_name="event_id", on_delete="CASCADE", index=False)
    channel = TextField()
    outcome = TextField()  # pending, sent, given_up
    attempts = SmallIntegerField(default=0)
    last_error = TextField(null=True)
    next_at = BigIntegerField()  # a pending delivery's next attempt
    claimed_until = BigIntegerField(default=0)  # a tick sending it holds it until then
    updated_at = BigIntegerField()

    class Meta:
        table_name = "alert_deliveries"
        primary_key = CompositeKey("event", "channel")


# The tick's due deliveries: only pending rows, so the index stays one small page.
AlertDelivery.add_index(AlertDelivery.index(AlertDelivery.next_at,
                                            where=(AlertDelivery.outcome == "pending"),
                                            name="alert_deliveries_pending"))

class HostBoot(BaseModel):
    """The boot (the kernel's boot id) in which a host last opened the database for writing:
    the first opening in a new boot closes the Runs the boot before left open
    (storage/reboot.py). One row per host, read once per start."""
    host = TextField(primary_key=True)
    boot_id = TextField()
    seen_at = BigIntegerField()

    class Meta:
        table_name = "host_boots"


class ClockStep(BaseModel):
    """A step of the wall clock that the service saw (runtime.ClockWatch): crond skipped
    (forward) or repeated (backward) the wall times in [lo, hi). Kept few (STEPS_KEPT
    rows), so the gate and health read them whole, without an index."""
    id = AutoField()
    at = BigIntegerField()  # when the service saw it, by the clock after the step
    step = BigIntegerField()  # seconds the clock jumped: positive forward
    lo = BigIntegerField()
    hi = BigIntegerField()

    class Meta:
        table_name = "clock_steps"


class ServiceOutage(BaseModel):
    """A time the crontab's tick found the service not answering (watch/outage.py): one
    row per outage, with its two messages ("not answering", "answering again").

    `is_open` is 1 while it lasts and null after: its unique index lets one outage be open
    at a time, so two ticks open it once, and closing it is a compare-and-set on it."""
    id = AutoField()
    is_open = SmallIntegerField(null=True, unique=True)
    url = TextField()
    reason = TextField()
    since = BigIntegerField()
    ended_at = BigIntegerField(null=True)
    # Per message: 0 to send, 1 done (sent, or given up); the channels that took it (a
    # comma list), the attempts, and until when a tick sending it holds it.
    down_state = SmallIntegerField(default=0)
    down_done = TextField(default="")
    down_attempts = SmallIntegerField(default=0)
    down_claim = BigIntegerField(default=0)
    up_state = SmallIntegerField(default=0)
    up_done = TextField(default="")
    up_attempts = SmallIntegerField(default=0)
    up_claim = BigIntegerField(default=0)

    class Meta:
        table_name = "service_outages"



class Host(BaseModel):
    """A host of the fleet: each qlshadow sharing the database under its QL_HOST_NAME records
    itself when it starts and at each tick (core/fleet.py). Runs and instances name it by
    id. block_wanted is raised by a cron change that alters the host's crontab block,
    block_installed is what the host last installed: its tick installs again when they
    differ (the fleet revision, compared in the row the tick writes anyway)."""
    id = AutoField()
    name = TextField(unique=True)
    version = TextField()
    first_seen = BigIntegerField()
    last_seen = BigIntegerField()
    block_wanted = BigIntegerField(default=0)
    block_installed = BigIntegerField(default=0)
    # "silent" once alerted as silent, null once alerted back (or never): the compare-and-set
    # that makes one tick of the whole fleet send each change (watch/alerts/).
    alert_state = TextField(null=True)

    class Meta:
        table_name = "hosts"


class Claim(BaseModel):
    """One firing of a `one`-mode cron, taken by the first host that asked (core/fleet.py):
    the key (cron_id, firing) decides, so the others do not run it."""
    cron_id = BigIntegerField()
    firing = BigIntegerField()  # the firing's instant, as the claiming host's clock read it
    host_id = IntegerField()
    at = BigIntegerField()

    class Meta:
        table_name = "claims"
        primary_key = CompositeKey("cron_id", "firing")


ALL_MODELS = (Cron, RunningInstance, App, Token, ShadowRun, ShadowFailure, AlertEvent,
              AlertDelivery, HostBoot, ClockStep, ServiceOutage, Host, Claim)
