"""The CLI's one table formatter and its time and duration text (qlshadow.cli.textout)."""
from __future__ import annotations

import time

import pytest

from qlshadow.cli.textout import Column, display_width, duration, record, table, when

RUN_ID = "01a22ef8-7ab0-7788-b517-c8063fc6e436"
COLUMNS = [Column("run"), Column("cron", right=True), Column("name", shrink=True)]
ROWS = [[RUN_ID, 1, "nightly backup of the whole router configuration"], [RUN_ID, 12, None]]


def test_a_table_pads_columns_and_marks_missing_values():
    assert table(COLUMNS, ROWS) == (
        "run                                   cron  name\n"
        f"{RUN_ID}     1  nightly backup of the whole router configuration\n"
        f"{RUN_ID}    12  -\n")


def test_a_narrow_terminal_shortens_names_but_never_ids():
    lines = table(COLUMNS, ROWS, width=60).splitlines()
    assert lines[1] == f"{RUN_ID}     1  nightly backup~"
    assert all(display_width(line) <= 60 for line in lines)


def test_when_nothing_can_shrink_the_table_stays_whole():
    lines = table(COLUMNS[:2], [row[:2] for row in ROWS], width=10).splitlines()
    assert lines[1] == f"{RUN_ID}     1"


def test_wide_characters_take_two_cells():
    text = table([Column("name", shrink=True), Column("id", right=True)],
                 [["备份路由器配置文件", 1], ["b", 2]], width=16)
    first, second = text.splitlines()[1:]
    assert first == "备份路由器~    1" and second == "b" + " " * 14 + "2"
    assert display_width(first) == display_width(second)


def test_a_record_aligns_its_labels():
    assert record([("id", 1), ("schedule", "0 4 * * *"), ("pid", None)]) == (
        "id:       1\nschedule: 0 4 * * *\npid:      -\n")


@pytest.mark.parametrize("seconds, text", [(None, "-"), (0, "0s"), (42, "42s"), (185, "3m05s"),
                                           (7380, "2h03m"), (273600, "3d04h"), (-5, "0s")])
def test_durations(seconds, text):
    assert duration(seconds) == text


def test_times_are_local_with_the_zone_named_or_utc(monkeypatch):
    monkeypatch.setenv("TZ", "CST-8")
    time.tzset()
    try:
        assert when(1764460800) == "2025-11-30 08:00:00 CST"
        assert when(1764460800, utc=True) == "2025-11-30 00:00:00 UTC"
        assert when(None) == "-"
    finally:
        monkeypatch.undo()
        time.tzset()
