"""Fault suite: crashes, outages, full disks, locks, bad input and attacks (`pytest -m faults`)."""
