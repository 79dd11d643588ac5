"""Shadow Runs: execution ids, deterministic Run/Attempt ids and task revisions, the writer
and the read side (no Flask)."""

# A Run's states, in the order a Run moves through them (docs/CONTRACT.md §3.5).
RUN_STATES = ("accepted", "spawned", "running", "exited")


def run_state(finished_at) -> str:
    """A stored Run's state: the writer stores Runs running or exited, and only an exited
    one has finished_at (models.ShadowRun keeps no state column)."""
    return "running" if finished_at is None else "exited"
# How a Run closed at a reboot (models.LOST_AT_REBOOT) says so in its JSON "outcome".
LOST_AT_REBOOT_WORDS = "lost at reboot"
# Where a Run came from, stored as its position here; each with its fixed trigger fields
# (trigger_type, triggered_by, execution_owner). Append only: positions are stored.
ORIGINS = ("scheduled_system",)
TRIGGERS = {"scheduled_system": ("scheduled_system", "legacy:system-crond", "legacy")}
