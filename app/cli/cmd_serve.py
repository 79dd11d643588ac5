"""`qlshadow serve`: the HTTP API with waitress, in this process."""
from __future__ import annotations

from qlshadow.cli.common import load_settings


def cmd_serve(args) -> int:
    # Flask and waitress load only for serve: the other commands (a task's token refresh
    # among them) start faster and smaller without them.
    from qlshadow.core.runtime import watch_clock
    from qlshadow.web.serving import serve
    settings = load_settings(args, server=True)
    watch_clock()  # clock steps, for the gate and health (runtime.py)
    return serve(settings)
