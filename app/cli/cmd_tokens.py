"""API client apps and tokens: `app create`, `token system|runner|metrics`."""
from __future__ import annotations

import os

from peewee import IntegrityError

from qlshadow.cli.common import open_db, print_json
from qlshadow.cli.errors import CliError
from qlshadow.core.auth import (RUNNER_APP, RUNNER_TOKEN_FILE, SYSTEM_APP, create_app_record,
                                runner_token, system_token)
from qlshadow.storage import db


def cmd_app_create(args) -> int:
    if args.name in (SYSTEM_APP, RUNNER_APP):
        raise CliError(f"the app name {args.name!r} is reserved for qlshadow's own tokens")
    _, database = open_db(args)
    scopes = sorted({s.strip() for s in args.scopes.split(",") if s.strip()})
    try:
        with database.connection_context(), db.write_transaction():
            client_id, secret = create_app_record(args.name, scopes)
    except IntegrityError:
        raise CliError(f"an app named {args.name!r} already exists") from None
    print_json({"name": args.name, "client_id": client_id, "client_secret": secret,
                 "scopes": scopes})
    return 0


def cmd_token_system(args) -> int:
    settings, database = open_db(args)
    with database.connection_context(), db.write_transaction():
        system_token(settings.token_file)
    print(settings.token_file)
    return 0


def cmd_token_runner(args) -> int:
    settings, database = open_db(args)
    with database.connection_context(), db.write_transaction():
        runner_token(settings.data_dir)
    print(os.path.join(settings.data_dir, RUNNER_TOKEN_FILE))
    return 0


def cmd_token_metrics(args) -> int:
    """Print a new scrape token that never expires, or (--revoke) revoke every one."""
    from qlshadow.core.auth import issue_metrics_token, revoke_metrics_tokens
    _, database = open_db(args)
    try:
        with database.connection_context(), db.write_transaction():
            result = revoke_metrics_tokens() if args.revoke else issue_metrics_token()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.revoke:
        print(f"revoked {result} metrics token(s); scrapes using them are refused within a minute")
    else:
        print(result)
    return 0
