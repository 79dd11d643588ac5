"""Step 0, the hosts of a fleet: a host going silent and coming back, told once for the
whole fleet by the tick that wins the host's row, through every channel."""
from __future__ import annotations

from qlshadow.i18n import N_, _
from qlshadow.storage import db


_HOST_TITLES = {"silent": N_("host {name} is silent"), "ok": N_("host {name} is back")}
_HOST_TEXTS = {"silent": N_("Host {name} (qlshadow {version}) was last seen at {at}: crons "
                            "that only it runs do not run now."),
               "ok": N_("Host {name} (qlshadow {version}) is seen again since {at}.")}


def host_changes(channels: list, now: int, send) -> int:
    """Tell each host going silent (its tick unseen for 3 minutes) and coming back, once for
    the whole fleet: the ticks of every host race for a compare-and-set on the host's row,
    and the one that wins sends through every channel (once, not tried again). A shared
    (PostgreSQL) database with two hosts or more; returns the changes this tick sent."""
    from qlshadow.core import fleet
    from qlshadow.storage.models import Host
    from qlshadow.timefmt import local_text
    with db.connected():
        if db.is_sqlite():
            return 0
        hosts = fleet.hosts_listing(now)
        if len(hosts) < 2:  # no other host to tell of this one: not a fleet
            return 0
        alerted = dict(Host.select(Host.name, Host.alert_state).tuples())
    sent = 0
    for host in hosts:
        old = alerted.get(host["name"])
        new = "silent" if host["state"] == "silent" else None
        if new == old:
            continue
        held = Host.alert_state.is_null() if old is None else Host.alert_state == old
        with db.connected(), db.write_transaction():
            won = Host.update(alert_state=new).where((Host.name == host["name"]) & held).execute()
        if not won:
            continue  # another host's tick told it
        state = new or "ok"
        title = "qlshadow: " + _(_HOST_TITLES[state]).format(name=host["name"])
        text = _(_HOST_TEXTS[state]).format(name=host["name"], version=host["version"],
                                            at=local_text(host["last_seen"]))
        for channel in channels:
            send(channel, title, text)
        sent += 1
    return sent
