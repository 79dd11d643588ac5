"""The fleet: the hosts sharing one database, the crons each runs, and the claims of `one` crons.

Each qlshadow records itself under its QL_HOST_NAME in `hosts` when it starts and at each
tick (one upsert that also returns its block revision). A cron names its hosts (["*"]: all)
and a mode: `each` (every named host runs every firing) or `one` (the first named host to
claim a firing runs it). The claim is one INSERT ... ON CONFLICT DO NOTHING on the key
(cron_id, firing), so the database decides the race across processes and hosts. The firing
is the one of the cron's schedule nearest to the time task.sh started, read by the claiming
host's own clock: each host's crond starts a firing at that host's idea of its minute, so
hosts whose clocks disagree by up to a minute still name the same firing.

On SQLite (one host by construction) Runs and instances store no host (null): nothing
grows and nothing changes for the user.
"""
from __future__ import annotations

import json
import logging
import time

from qlshadow import __version__
from qlshadow.errors import InvalidInput
from qlshadow.storage.models import Claim, Cron, Host, database

log = logging.getLogger("qlshadow")

ALL = "*"
MODES = ("each", "one")
SILENT_AFTER = 180  # a host whose tick was not seen for this long is `silent`
CLAIMS_KEPT = 2 * 86400  # a cron's claims older than this go with its next claim
MAX_HOSTS = 64  # names a cron may list


def cron_hosts(stored) -> list:
    """A cron's hosts as stored (JSON text) as a list; null (an old row) is every host."""
    if not stored:
        return [ALL]
    try:
        hosts = json.loads(stored)
    except ValueError:
        return [ALL]
    return hosts if isinstance(hosts, list) and hosts else [ALL]


def runs_on(cron: dict, host_name: str) -> bool:
    """True when the cron names this host (or every host)."""
    hosts = cron_hosts(cron.get("hosts"))
    return ALL in hosts or host_name in hosts


def mode(cron: dict) -> str:
    return cron.get("hosts_mode") or "each"


def check_hosts(value, key: str = "hosts") -> str:
    """The stored form (compact JSON) of a request's hosts, or InvalidInput."""
    from qlshadow.config import ConfigError, check_host_name
    if not isinstance(value, list) or not value or len(value) > MAX_HOSTS:
        raise InvalidInput(f"'{key}' must be a list of 1 to {MAX_HOSTS} host names, or [\"*\"] "
                           "for every host.")
    if ALL in value:
        if value != [ALL]:
            raise InvalidInput(f"'{key}': \"*\" means every host and stands alone.")
        return json.dumps([ALL])
    names = []
    for name in value:
        try:
            names.append(check_host_name(name if isinstance(name, str) else ""))
        except ConfigError:
            raise InvalidInput(f"'{key}': {name!r} is not a host name (1 to 63 letters, digits, "
                               "dots, hyphens or underscores).") from None
    return json.dumps(sorted(set(names)), separators=(",", ":"))


def check_mode(value, key: str = "hosts_mode") -> str | None:
    if value not in MODES:
        raise InvalidInput(f"'{key}' must be \"each\" (every named host runs every firing) or "
                           "\"one\" (exactly one of them runs each firing).")
    return None if value == "each" else value


# --- hosts ------------------------------------------------------------------------------

def record_host(name: str, now: int | None = None) -> tuple:
    """Record this host as seen now, in the caller's write transaction.

    Returns (host id, block_wanted, block_installed): one upsert, no read before it.
    """
    now = int(time.time()) if now is None else now
    q = database.obj.param
    row = database.obj.execute_sql(
        f'INSERT INTO "hosts" ("name", "version", "first_seen", "last_seen", "block_wanted", '
        f'"block_installed") VALUES ({q}, {q}, {q}, {q}, 0, 0) ON CONFLICT ("name") DO UPDATE '
        f'SET "version" = excluded."version", "last_seen" = excluded."last_seen" '
        f'RETURNING "id", "block_wanted", "block_installed"',
        (name, __version__, now, now)).fetchone()
    return tuple(row)


def start(settings, sqlite: bool) -> int | None:
    """At start-up: record this host; the id Runs and instances carry (None on SQLite)."""
    from peewee import DatabaseError

    from qlshadow.storage.db import connected, write_transaction
    try:
        with connected(), write_transaction():
            host_id = record_host(settings.host_name)[0]
    except DatabaseError as exc:
        if not sqlite:
            raise
        # One host, whose id nothing carries: a start on a full partition goes on, as it
        # does without this row (its writes fail until `prune` makes room).
        log.warning("this host is not recorded at start: %s", str(exc).strip() or
                    type(exc).__name__)
        return None
    return None if sqlite else host_id


def want_blocks(before: dict | None, after: dict | None) -> None:
    """A cron change that alters crontab blocks: raise the block revision of every host whose
    block it changes (named before or after; ["*"]: all), in the change's transaction.
    Each such host installs its own block at its next tick."""
    names = set()
    for cron in (before, after):
        if cron is not None:
            names.update(cron_hosts(cron.get("hosts")))
    query = Host.update(block_wanted=Host.block_wanted + 1)
    if ALL not in names:
        query = query.where(Host.name.in_(sorted(names)))
    query.execute()


def installed_block(name: str, revision: int) -> None:
    """This host installed its block as of that revision (a later change raises it again)."""
    (Host.update(block_installed=revision)
     .where((Host.name == name) & (Host.block_installed < revision)).execute())


def hosts_listing(now: int | None = None, one_host: bool = False) -> list:
    """Every host with its version, first and last seen, crons and state (ok or silent).

    one_host: a SQLite database, whose one host records itself only when it starts (its
    tick writes nothing to the flash), so it is never judged silent.
    """
    now = int(time.time()) if now is None else now
    crons = list(Cron.select(Cron.id, Cron.hosts).order_by(Cron.id).dicts())
    out = []
    for host in Host.select().order_by(Host.name).dicts():
        silent = not one_host and now - host["last_seen"] > SILENT_AFTER
        out.append({"name": host["name"], "version": host["version"],
                    "first_seen": host["first_seen"], "last_seen": host["last_seen"],
                    "crons": [c["id"] for c in crons if runs_on(c, host["name"])],
                    "state": "silent" if silent else "ok"})
    return out


def hosts_seen(now: int) -> dict:
    """{host id: (name, first_seen, last_seen, silent)} of every recorded host (health
    judges `each` crons per host with it): one small read of the hosts table."""
    return {i: (name, first, last, now - last > SILENT_AFTER) for i, name, first, last in
            Host.select(Host.id, Host.name, Host.first_seen, Host.last_seen).tuples()}


def host_names() -> dict:
    """{host id: name}, for listings that show each execution's host. A Run or instance
    stores no host where one host has the database (SQLite): the key None names that
    host when there is exactly one, else (PostgreSQL rows from before the fleet) nothing."""
    names = dict(Host.select(Host.id, Host.name).tuples())
    names[None] = next(iter(names.values())) if len(names) == 1 else None
    return names


def host_filter(field, name: str):
    """A where-clause keeping the rows of one host (by name) in a column of host ids."""
    names = host_names()
    ids = [i for i, n in names.items() if n == name and i is not None]
    if not ids:
        return field.in_([])
    where = field == ids[0]
    if names[None] == name:
        where |= field.is_null()
    return where


# --- claims -----------------------------------------------------------------------------

def nearest_firing(schedule: str, at: int) -> int | None:
    """The firing of a 5-field schedule nearest to `at` (local wall time, as crond reads it);
    None for a schedule crond does not run (6 fields, @once, @boot)."""
    from qlshadow.core.schedule import field_count
    if field_count(schedule) != 5:
        return None
    from datetime import datetime

    from cronsim import CronSim
    moment = datetime.fromtimestamp(at)
    # cronsim answers strictly before / after its start: one second later finds `at` itself.
    before = next(CronSim(schedule, datetime.fromtimestamp(at + 1), reverse=True), None)
    after = next(CronSim(schedule, moment), None)
    found = [int(time.mktime(d.timetuple())) for d in (before, after) if d is not None]
    return min(found, key=lambda t: (abs(t - at), t)) if found else None


def claim(cron_id: int, host_name: str, at: int | None, now: int | None = None) -> dict:
    """Claim the firing of a cron nearest to `at` for this host; the first claim wins.

    One write transaction: the host's id, the claim's insert (ON CONFLICT DO NOTHING on
    (cron_id, firing)), the winner read back when it lost, and the cron's old claims.
    Returns {"won", "firing", "host"} (host: the winner's name). InvalidInput for a cron
    that does not exist or that crond does not run.
    """
    from qlshadow.errors import NotFound
    from qlshadow.storage.db import write_transaction
    now = int(time.time()) if now is None else now
    at = now if at is None else at
    cron = Cron.select(Cron.schedule).where(Cron.id == cron_id).tuples().first()
    if cron is None:
        raise NotFound(f"Cron {cron_id} does not exist.")
    firing = nearest_firing(cron[0], at)
    if firing is None:
        raise InvalidInput(f"Cron {cron_id}'s schedule has no firings crond starts to claim.")
    q = database.obj.param
    with write_transaction():
        host_id = Host.select(Host.id).where(Host.name == host_name).scalar()
        if host_id is None:
            host_id = record_host(host_name, now)[0]
        won = database.obj.execute_sql(
            f'INSERT INTO "claims" ("cron_id", "firing", "host_id", "at") VALUES '
            f'({q}, {q}, {q}, {q}) ON CONFLICT DO NOTHING', (cron_id, firing, host_id, now)).rowcount
        winner = host_name
        if won:
            (Claim.delete().where((Claim.cron_id == cron_id)
                                  & (Claim.firing < firing - CLAIMS_KEPT)).execute())
        else:
            winner = (Host.select(Host.name).join(Claim, on=(Claim.host_id == Host.id))
                      .where((Claim.cron_id == cron_id) & (Claim.firing == firing)).scalar())
    return {"won": bool(won), "firing": firing, "host": winner}
