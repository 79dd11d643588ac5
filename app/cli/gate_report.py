"""The reconciliation gate's report as text for a terminal (`qlshadow reconcile`).

It turns the document reconcile.reconcile returns (docs/CONTRACT.md §6) into one row
per cron, in local time, then why the verdict is what it is (`--json` prints the document).
"""
from __future__ import annotations

# (column title, key of a cron's report), left to right.
_COLUMNS = (("cron", "cron_id"), ("name", "name"), ("schedule", "schedule"),
            ("expected", "expected"), ("runs", "runs"), ("exited", "exited"),
            ("running", "running"), ("failed", "failed"), ("finish_only", "finish_only"),
            ("stuck", "stuck"), ("finish_lost", "finish_lost"), ("missed", "missed"),
            ("skipped", "skipped_running"), ("double", "double"), ("clock_step", "clock_step"),
            ("unmatched", "unmatched_instances"),
            ("drift", "drift"), ("invalid", "invalid"),
            ("verdict", "verdict"))


def judged_from_words(report: dict, when) -> str:
    """Why a changed (or disabled and enabled again) cron is judged from when it is."""
    if report["evaluated_from"]:
        return ("was changed or enabled again in the window: its firings are judged from "
                f"{when(report['evaluated_from'])}, when it took its present form")
    if not report["active"]:
        return "is not active in system mode: none of its firings is judged"
    return ("was changed or enabled again after the window's last judged minute: none of its "
            "firings is judged yet (a window that ends later judges them)")


def format_report(data: dict) -> str:
    """The gate's report as a plain table, then the notes and the reasons."""
    from qlshadow.cli.textout import shown
    from qlshadow.timefmt import local_text as when

    def cell(report, key):
        value = report[key]
        if key in ("missed", "double"):
            return str(len(value) + report[key + "_omitted"])
        text = shown(str(value))  # a name is anyone's text: no ESC, no line break
        if key == "name" and len(text) > 24:
            return text[:23] + "~"
        return text

    window, gate = data["window"], data["gate"]
    lines = [f"reconcile {when(window['since'])} .. {when(window['until'])}: "
             f"{gate['verdict'].upper()}"]
    rows = [[title for title, _ in _COLUMNS]]
    rows += [[cell(r, key) for _, key in _COLUMNS] for r in data["crons"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    text_columns = {1, 2, len(_COLUMNS) - 1}
    for row in rows:
        lines.append("  ".join(v.ljust(w) if i in text_columns else v.rjust(w)
                               for i, (v, w) in enumerate(zip(row, widths, strict=True))).rstrip())
    for r in data["crons"]:
        if r["definition_changed"]:
            lines.append(f"note: cron {r['cron_id']} " + judged_from_words(r, when))
    if gate["failures"]:
        lines.append("accept failures: " + ", ".join(
            f"{reason} {count}" for reason, count in sorted(gate["failures"].items())))
    for reason in gate["reasons"]:
        lines.append(f"- {shown(reason)}")
    return "\n".join(lines) + "\n"
