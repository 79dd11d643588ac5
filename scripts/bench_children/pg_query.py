"""One SQL statement on PostgreSQL through the servers' driver (the bench's client stays
stdlib-only); prints the first column of the first row.

Arguments: URL SQL.
"""
import sys
import psycopg2
conn = psycopg2.connect(sys.argv[1], connect_timeout=3)
conn.autocommit = True
cur = conn.cursor()
cur.execute(sys.argv[2])
print(cur.fetchone()[0] if cur.description else "")
