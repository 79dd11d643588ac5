"""`qlshadow` as on a router, where no PostgreSQL driver is installed (Peewee imports any
it finds): the drivers are made unimportable before the CLI loads (scripts/bench_notify.py)."""
import sys

sys.modules["psycopg2"] = sys.modules["psycopg"] = None

from qlshadow.cli import main  # noqa: E402

sys.exit(main())
