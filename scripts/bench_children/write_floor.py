"""The write floor: N SQLite transactions updating one row; prints the bytes written.

Arguments: PATH COUNT ROWS SYNCHRONOUS.
"""
import os
import sqlite3
import sys

def write_bytes():
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])

path, count, rows, level = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
conn = sqlite3.connect(path, isolation_level=None)
conn.execute("PRAGMA journal_mode=wal")
conn.execute("PRAGMA synchronous=" + level)
conn.execute("PRAGMA cache_size=-512")
conn.execute("CREATE TABLE crons (id INTEGER PRIMARY KEY, name TEXT, status INTEGER, "
             "pid INTEGER, log_path TEXT, last_execution_time INTEGER)")
conn.executemany("INSERT INTO crons (id, name, status) VALUES (?, ?, 1)",
                 [(i, f"cron {i}") for i in range(1, rows + 1)])
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
os.sync()
before = write_bytes()
for n in range(count):
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE crons SET status = ?, pid = ? WHERE id = ?", (n % 2, n, n % rows + 1))
    conn.execute("COMMIT")
after = write_bytes()
print(after - before)
