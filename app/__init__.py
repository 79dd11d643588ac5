"""qlshadow: keeps 2.x QingLong cron status for system-crond jobs and, when asked,
records every execution exactly once as a Shadow Run.

The web app is built by qlshadow.web.views.create_app; the command is qlshadow.cli.main.
"""

__version__ = "0.1.0"
