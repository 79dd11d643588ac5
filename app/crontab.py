"""Crontab rendering (SPEC §5). Placeholder until the crontab issue lands."""


def sync(settings) -> None:
    """Render the crontab file and, in system mode, install it."""
