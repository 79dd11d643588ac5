"""Shadow Runs: execution ids, deterministic Run/Attempt ids and task revisions, the writer
and the read side (no Flask)."""

# A Run's states, in the order a Run moves through them (docs/CONTRACT.md §4.3).
RUN_STATES = ("accepted", "spawned", "running", "exited")
