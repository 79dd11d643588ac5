"""The metrics counters a callback bumps (one answer, one Shadow outcome), timed in a
loop; prints microseconds per callback.
"""
import time
from qlshadow.core.counters import Counters
counters = Counters()
n = 200000
t = time.process_time()
for _ in range(n):
    counters.count_callback("ok")
    counters.count_shadow("created")
print((time.process_time() - t) / n * 1e6)
