"""The crontab as the database has it: render our block from the stored crons, install it
(sync) or take it out (remove), under the locks. A cron change installs through
service/cron_change.py, which keeps the change only when its install succeeds."""
from __future__ import annotations

import os

from qlshadow.host.crontab.content import render_rows
from qlshadow.host.crontab.errors import CrontabError
from qlshadow.host.crontab.install import install_block, put
from qlshadow.host.crontab.lock import Lock
from qlshadow.host.crontab.recorded import check_installer
from qlshadow.host.crontab.runner_files import prepare_runner
from qlshadow.host.crontab.state import installed_file, note_state, state_file
from qlshadow.host.crontab.stored import stored_crons


def render(settings) -> str:
    """Our block's content (header, one line per cron) for the crons in the database."""
    return render_rows(settings, stored_crons())[0]


def sync_locked(settings) -> str:
    """sync with the locks already held."""
    check_installer(settings)  # this command's problem, not the server's state
    try:
        prepare_runner(settings)
        outcome = put(settings, *render_rows(settings, stored_crons()))
    except CrontabError as exc:
        note_state(settings, str(exc))
        raise
    note_state(settings, None)
    return outcome


def sync(settings) -> str:
    """Render our block from the database and (system mode) install it in the crontab.

    Returns one line saying what was done where; a failure raises CrontabError and is
    kept for install_state until a later sync succeeds.
    """
    with Lock(settings):
        return sync_locked(settings)


def remove(settings) -> str:
    """Take our block out of the crontab and forget the block file; one line says what."""
    with Lock(settings):
        check_installer(settings)
        if not settings.crontab_install.strip():
            return "QL_CRONTAB_INSTALL is empty: qlshadow installed nothing to remove"
        installed = install_block(settings, None)
        where = f"with `{settings.crontab_install}`"
        for path in (os.path.abspath(settings.crontab_file), state_file(settings),
                     installed_file(settings)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise CrontabError(f"cannot remove {path}: {exc.strerror or exc}") from None
        if not installed:
            return f"no qlshadow block in the crontab read {where.replace('with', 'for')}"
        return f"removed qlshadow's block {where}"
