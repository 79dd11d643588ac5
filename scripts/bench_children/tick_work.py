"""The alert tick's own work in a fresh process, its imports excluded (scripts/bench_notify.py);
prints milliseconds of CPU and 1 when it did something.

Argument: the config file.
"""
import sys
import time
from qlshadow.watch import alerts, health, notify, reconcile  # noqa: F401
from qlshadow import config
from qlshadow.storage import db  # noqa: F401
import cronsim  # noqa: F401
began = time.process_time()
settings = config.load(environ={}, config_file=sys.argv[1])
channels = notify.configured_channels(notify.load_settings({}, sys.argv[1]))
database, _ = db.open_database(settings, create=False)
with database.connection_context():
    done = alerts.tick(settings, channels)
spent = time.process_time() - began
print(round(1000 * spent, 2), int(any(done.values())))
