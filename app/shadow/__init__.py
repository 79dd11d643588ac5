"""Shadow Runs: execution ids, deterministic ids, task revisions and the writer (no Flask)."""
