"""The outcome of the last install, kept beside the block file: why it failed, or which block
file it installed with which command, read back as the state /health and `qlshadow crontab`
report."""
from __future__ import annotations

import os

from qlshadow.files import write_private
from qlshadow.host.crontab.data_dir import write_if_changed
from qlshadow.host.crontab.recorded import speaks_for_server


def state_file(settings) -> str:
    """Where the reason of the last failed install is kept until an install succeeds."""
    return os.path.abspath(settings.crontab_file) + ".failed"


def installed_file(settings) -> str:
    """Where the last install's outcome is kept: the install command and the digest of the
    block file it installed, so that the block file is reported installed only when it was
    (a block file written by a command that installed nothing, or elsewhere, is not)."""
    return os.path.abspath(settings.crontab_file) + ".installed"


def _digest(text: str) -> str:
    import hashlib
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def note_installed(settings, content: str | None) -> None:
    """Record that content was installed with this settings' command (None: nothing was)."""
    path = installed_file(settings)
    try:
        if content is None:
            if os.path.exists(path):
                os.unlink(path)
        else:
            import json
            write_if_changed(path, json.dumps({"install": settings.crontab_install,
                                               "sha256": _digest(content)}) + "\n")
    except OSError:
        pass  # install_state then says the block file is not known to be installed


def _installed_as_written(settings) -> bool:
    """True when the block file is what the last install installed, with this command."""
    import json
    try:
        with open(installed_file(settings), encoding="utf-8") as fh:
            noted = json.load(fh)
        with open(settings.crontab_file, encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read()
    except (OSError, ValueError):
        return False
    return (isinstance(noted, dict) and noted.get("install") == settings.crontab_install
            and noted.get("sha256") == _digest(text))


def install_state(settings) -> str:
    """The crontab's state for /health and `qlshadow crontab`: installed, or why not."""
    if settings.scheduler != "system":
        return "not used: node scheduler"
    try:
        with open(state_file(settings), encoding="utf-8") as fh:
            return "not installed: " + (fh.read().strip() or "unknown reason")
    except OSError:
        pass
    if not settings.crontab_install.strip():
        return "written, not installed: QL_CRONTAB_INSTALL is empty"
    if os.path.exists(settings.crontab_file):
        if _installed_as_written(settings):
            return "installed"
        return (f"not installed: {os.path.abspath(settings.crontab_file)} holds a block "
                f"that `{settings.crontab_install}` did not install; `qlshadow crontab` "
                "installs it")
    return "none yet"


def install_failed(state: str) -> bool:
    """True for an install_state that /health reports as not ok."""
    return state.startswith("not installed")


def note_state(settings, problem: str | None) -> None:
    """Keep problem as the reason the last install failed (None: it succeeded), when this
    process installs as the server does."""
    if not speaks_for_server(settings):
        return  # another install target's outcome is not the server's state
    path = state_file(settings)
    try:
        if problem is None:
            if os.path.exists(path):
                os.unlink(path)
        else:
            write_private(path, problem + "\n")
    except OSError:
        pass  # the failure is still raised to the caller and logged there
