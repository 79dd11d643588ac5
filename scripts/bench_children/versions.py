"""The Python, SQLite, Flask, waitress and Peewee versions of the servers' Python, one a line
(scripts/bench.py's machine description)."""
import importlib.metadata
import sqlite3
import sys

print(sys.version.split()[0])
print(sqlite3.sqlite_version)
print(" ".join(f"{name}={importlib.metadata.version(name)}" for name in ("flask", "waitress", "peewee")))
