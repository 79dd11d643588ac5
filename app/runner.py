"""Manual runs (SPEC §5). Placeholder until the crontab issue lands."""
from .errors import ApiError


def start_manual(settings, ids):
    raise ApiError(501, "Manual runs are not available yet.")
