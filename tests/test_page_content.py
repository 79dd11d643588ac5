"""What the status page shows, read from a real database on both backends: `/` for a
browser, the crons list in health order with its strip, one cron's merged executions, a
Run's page, task logs, the gate on a phone, the health page in words, and time zones."""
from __future__ import annotations

import os
import re
import time

import pytest

from qlshadow.storage import db
from qlshadow.core.auth import create_app_record
from qlshadow.storage.models import Cron, RunningInstance, ShadowRun
from helpers import ONE_BACKEND, STATUS_PATH
from reconcile_history import took

pytestmark = pytest.mark.shadow_on

EID = "legacy-system:{s}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.fixture
def page(app, client):
    """A client signed in to the page."""
    with db.database.connection_context(), db.write_transaction():
        client_id, secret = create_app_record("viewer", ["crons", "runs"])
    response = client.post("/page/login", data={"client_id": client_id, "client_secret": secret})
    assert response.status_code == 303
    return client


class Feed:
    """Sends the callbacks task.sh sends, with explicit start times and execution ids."""

    def __init__(self, client, auth):
        self.client, self.auth, self.n = client, auth, 0

    def start(self, cron_id: int, at: int, scheduled: bool = True, log: str | None = None) -> int:
        self.n += 1
        body = {"ids": [cron_id], "status": 0, "pid": 5000 + self.n, "last_execution_time": at}
        if scheduled:
            body["execution_id"] = EID.format(s=at, n=self.n)
        if log:
            body["log_path"] = log
        self._send(body)
        return self.n

    def finish(self, cron_id: int, n: int, at: int, code: int = 0, scheduled: bool = True,
               log: str | None = None) -> None:
        body = {"ids": [cron_id], "status": 1, "pid": 5000 + n, "exit_code": code,
                "last_execution_time": at, "last_running_time": 2}
        if scheduled:
            body["execution_id"] = EID.format(s=at, n=n)
        if log:
            body["log_path"] = log
        self._send(body)
        took(cron_id, at, 2)  # it ran 2 s, not until the callback's clock

    def run(self, cron_id: int, at: int, code: int = 0, scheduled: bool = True,
            log: str | None = None) -> int:
        n = self.start(cron_id, at, scheduled, log)
        self.finish(cron_id, n, at, code, scheduled, log)
        return n

    def _send(self, body: dict) -> None:
        response = self.client.put(STATUS_PATH, json=body, headers=self.auth)
        assert response.status_code == 200, response.get_json()


@pytest.fixture
def feed(client, auth) -> Feed:
    return Feed(client, auth)


def backdate(cron_id: int, seconds: int) -> None:
    """Make a cron look created (and last changed) `seconds` ago, so its firings are judged."""
    at = int(time.time()) - seconds
    with db.database.connection_context(), db.write_transaction():
        Cron.update(created_at=at, updated_at=at).where(Cron.id == cron_id).execute()


def html_of(client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.get_data(as_text=True)


def row_of(html: str, name: str) -> str:
    """The <tr> of the crons list whose name link is `name`."""
    for row in html.split("<tr>")[1:]:
        if f">{name}</a>" in row:
            return row.split("</tr>")[0]
    raise AssertionError(f"no row for {name}")


# --- `/` --------------------------------------------------------------------------------

@ONE_BACKEND
def test_a_browser_at_the_root_is_sent_to_the_page_then_to_sign_in(client):
    response = client.get("/", headers={"Accept": BROWSER})
    assert response.status_code == 303 and response.headers["Location"].endswith("/page/")
    response = client.get(response.headers["Location"], headers={"Accept": BROWSER})
    assert response.status_code == 303 and response.headers["Location"].endswith("/page/login")


@ONE_BACKEND
@pytest.mark.parametrize("accept", [None, "*/*", "application/json", "text/html;q=0"])
def test_the_root_answers_json_to_a_client_that_does_not_ask_for_html(client, accept):
    response = client.get("/", headers={"Accept": accept} if accept else {})
    assert response.status_code == 404 and response.is_json
    assert response.get_json() == {"code": 404,
                                   "message": "No such endpoint; the status page is at /page/."}


@ONE_BACKEND
def test_open_paths_answer_json_even_to_a_browser(client):
    response = client.get("/open/crons", headers={"Accept": BROWSER})
    assert response.status_code == 401 and response.is_json
    response = client.get("/open/nothing-here", headers={"Accept": BROWSER})
    assert response.status_code == 404 and response.is_json


# --- the crons list ---------------------------------------------------------------------

def test_the_list_puts_failed_missed_and_stuck_crons_first_with_their_state_in_words(
        page, feed, make_cron):
    now = int(time.time())
    fine = make_cron(name="fine", schedule="0 0 1 1 *")["id"]
    feed.run(fine, now - 600)
    make_cron(name="fresh", schedule="0 0 1 1 *")
    failing = make_cron(name="failing", schedule="0 0 1 1 *")["id"]
    feed.run(failing, now - 300, code=4)
    hung = make_cron(name="hung", schedule="0 0 1 1 *")["id"]
    feed.start(hung, now - 7200)
    absent = make_cron(name="absent", schedule="*/5 * * * *")["id"]
    backdate(absent, 3 * 3600)
    html = html_of(page, "/page/")
    order = [html.index(f">{name}</a>") for name in ("failing", "absent", "hung", "fresh", "fine")]
    assert order == sorted(order)
    assert re.search(r'class="state failed">Failed<', row_of(html, "failing"))
    assert "exited with code 4" in row_of(html, "failing")
    assert re.search(r'class="state missed">Missed a firing<', row_of(html, "absent"))
    assert re.search(r'class="state stuck">Stuck<', row_of(html, "hung"))
    assert re.search(r'class="state new">New, never ran<', row_of(html, "fresh"))
    assert re.search(r'class="state ok">OK<', row_of(html, "fine"))
    # Next expected and last success, as times with the zone named.
    absent_row = row_of(html, "absent")
    assert re.search(r'data-label="Next expected">\d{4}-\d\d-\d\d \d\d:\d\d UTC<', absent_row)
    assert re.search(r'data-label="Last success">\d{4}-\d\d-\d\d \d\d:\d\d UTC<',
                     row_of(html, "fine"))
    assert 'data-label="Last success">—<' in row_of(html, "failing")


def test_missed_firings_are_gaps_in_the_strip_where_the_schedule_fired(page, feed, make_cron):
    now = int(time.time())
    base = now // 300 * 300  # the newest firing of */5, at most 5 minutes ago
    cron = make_cron(name="every-5", schedule="*/5 * * * *")["id"]
    backdate(cron, now - (base - 1800 - 10))
    for offset, code in ((1800, 0), (1500, 0), (900, 0), (300, 3), (0, 0)):
        feed.run(cron, base - offset + 1, code=code)
    html = html_of(page, "/page/")
    kinds = re.findall(r'<rect class="(ok|failed|running|unknown|missed|late)"', row_of(html, "every-5"))
    assert kinds == ["ok", "ok", "missed", "ok", "missed", "failed", "ok"]
    assert "2 missed" in row_of(html, "every-5")
    cron_html = html_of(page, f"/page/crons/{cron}")
    assert re.findall(r'<rect class="(ok|failed|missed)"', cron_html) == kinds


def test_a_firing_still_within_its_grace_is_drawn_late_and_older_ones_missed(page, make_cron):
    cron = make_cron(name="every-minute", schedule="* * * * *", grace=120)["id"]
    backdate(cron, 330)
    html = html_of(page, "/page/")
    kinds = re.findall(r'<rect class="(ok|failed|missed|late)"', row_of(html, "every-minute"))
    # The newest due firing is under 2 minutes old: within its 120 s grace, so late.
    assert len(kinds) >= 4 and kinds[-1] == "late" and set(kinds[:-1]) == {"missed"}
    assert 'class="state missed">Missed a firing<' in row_of(html, "every-minute")


def test_firings_in_a_step_of_the_clock_are_drawn_as_clock_steps_not_missed(page, feed,
                                                                           make_cron):
    from qlshadow.core.runtime import record_step
    now = int(time.time())
    base = now // 600 * 600  # the newest firing of */10
    cron = make_cron(name="stepped", schedule="*/10 * * * *")["id"]
    backdate(cron, now - (base - 180 * 60))
    for minutes in (170, 160, 150, 140, 130, 120, 110, 100, 10, 0):
        feed.run(cron, base - minutes * 60 + 1)
    pattern = r'<rect class="(ok|failed|missed|late|clock_step)"'
    kinds = re.findall(pattern, row_of(html_of(page, "/page/"), "stepped"))
    assert kinds == ["ok"] * 8 + ["missed"] * 8 + ["ok"] * 2
    # The clock jumped over the firings from 90 to 30 minutes ago: crond ran none of them.
    record_step(3600, base - 95 * 60, base - 25 * 60, base - 25 * 60)
    row = row_of(html_of(page, "/page/"), "stepped")
    assert re.findall(pattern, row) == ["ok"] * 8 + ["clock_step"] * 7 + ["missed"] + ["ok"] * 2
    assert "7 clock step" in row and "1 missed" in row
    assert "in a step of the host&#39;s clock: not missed" in row
    assert re.findall(pattern, html_of(page, f"/page/crons/{cron}")) == re.findall(pattern, row)
    assert "dotted grey outlines are firings in a step of the host" in html_of(page, "/page/")


def test_a_stuck_run_is_drawn_unlike_a_live_one(page, feed, make_cron):
    now = int(time.time())
    hung = make_cron(name="hung", schedule="0 0 1 1 *")["id"]
    feed.start(hung, now - 7200)
    live = make_cron(name="live", schedule="0 0 1 1 *")["id"]
    feed.start(live, now - 10)
    html = html_of(page, "/page/")
    hung_row, live_row = row_of(html, "hung"), row_of(html, "live")
    assert '<rect class="stuck"' in hung_row and 'class="running"' not in hung_row
    assert re.search(r"<title>stuck since \d{4}-\d\d-\d\d \d\d:\d\d UTC: started ", hung_row)
    assert '<rect class="running"' in live_row and 'class="stuck"' not in live_row
    cron_html = html_of(page, f"/page/crons/{hung}")
    assert re.search(r'<span class="stuck" title="stuck since [^"]+">stuck since ', cron_html)


def test_an_open_execution_older_than_a_newer_one_is_finish_lost_not_running(page, feed, make_cron):
    now = int(time.time())
    cron = make_cron(name="lost-finish", schedule="0 0 1 1 *")["id"]
    feed.start(cron, now - 900)
    feed.run(cron, now - 300)
    html = html_of(page, f"/page/crons/{cron}")
    assert re.findall(r'<rect class="(ok|running|stuck|finish_lost)"', html) == [
        "finish_lost", "ok"]
    assert "no finish was recorded" in html and "finish lost" in html


# --- one cron ---------------------------------------------------------------------------

def test_a_cron_page_has_one_row_per_execution_marks_manual_runs_and_links_each_run(
        app, page, feed, make_cron, auth):
    now = int(time.time())
    cron = make_cron(name="report", schedule="0 0 1 1 *")["id"]
    feed.run(cron, now - 900)
    feed.run(cron, now - 600, scheduled=False)  # a manual run: Legacy only
    feed.run(cron, now - 300, code=2)
    run_ids = [r["id"] for r in page.get(f"/open/runs?cron_id={cron}", headers=auth)
               .get_json()["data"]]
    assert len(run_ids) == 2
    html = html_of(page, f"/page/crons/{cron}")
    table = html.split('id="executions"')[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + 3  # the head and one row per execution
    assert table.count('<span class="badge warn">manual</span>') == 1
    assert table.count(">crond<") == 2
    for run_id in run_ids:  # the full id, linked to its page
        assert f'<a href="/page/runs/{run_id}"><code>{run_id}</code></a>' in table
    assert "Shadow Runs" not in html and "Legacy instances" not in html


def test_durations_under_a_second_are_shown_as_such(page, feed, make_cron):
    now = int(time.time())
    cron = make_cron(name="quick", schedule="0 0 1 1 *")["id"]
    feed.run(cron, now - 100)
    with db.database.connection_context(), db.write_transaction():
        # Finished in the second it started, as a sub-second task does.
        RunningInstance.update(finished_at=RunningInstance.started_at).execute()
        ShadowRun.update(finished_at=ShadowRun.accepted_at).execute()
        Cron.update(last_running_time=None).execute()
    html = html_of(page, f"/page/crons/{cron}")
    assert 'data-label="Duration" class="num">&lt;1 s<' in html
    assert "<dt>Last duration</dt><dd>&lt;1 s</dd>" in html
    assert '<span class="small">&lt;1 s · exit <span class="ok">0</span>' in html_of(page, "/page/")


def test_older_executions_are_on_further_pages(page, feed, make_cron, monkeypatch):
    from qlshadow.web.views.page import crons as page_crons
    monkeypatch.setattr(page_crons, "RUNS_LIMIT", 3)
    now = int(time.time())
    cron = make_cron(name="paged", schedule="0 0 1 1 *")["id"]
    starts = [now - 100 * k for k in range(7, 0, -1)]
    for n, at in enumerate(starts):
        feed.run(cron, at, scheduled=n % 2 == 0)
    seen, path = [], f"/page/crons/{cron}"
    while path:
        html = html_of(page, path)
        table = html.split('id="executions"')[1].split("</table>")[0]
        seen += [int(i) for i in re.findall(r'data-label="Instance" class="num">(\d+)<', table)]
        found = re.search(r'href="(/page/crons/\d+\?before=\d+)#executions" rel="next"', html)
        path = found.group(1) if found else None
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == 7


def test_the_run_page_shows_the_run_its_attempt_and_its_log(app, page, feed, make_cron, auth):
    now = int(time.time())
    cron = make_cron(name="report", schedule="0 0 1 1 *")["id"]
    write_log(app, "report/a.log", "".join(f"line {n}\n" for n in range(1, 31)))
    feed.run(cron, now - 60, code=1, log="report/a.log")
    run = page.get(f"/open/runs?cron_id={cron}", headers=auth).get_json()["data"][0]
    html = html_of(page, f"/page/runs/{run['id']}")
    assert f"<h1>Run <code>{run['id']}</code></h1>" in html
    assert f'href="/page/crons/{cron}">report</a>' in html and run["request_id"] in html
    assert 'id="attempts"' in html and 'class="failed">1<' in html
    log = html.split('<pre class="log">')[1].split("</pre>")[0]
    assert log.splitlines() == [f"line {n}" for n in range(11, 31)]


@pytest.mark.parametrize("run_id", ["00000000-0000-0000-0000-000000000000", "not-a-run"])
def test_an_unknown_run_is_a_404_page(page, run_id):
    response = page.get(f"/page/runs/{run_id}")
    assert response.status_code == 404 and b"does not exist." in response.data


def test_a_run_page_without_a_session_redirects_to_sign_in(client):
    response = client.get("/page/runs/00000000-0000-0000-0000-000000000000")
    assert response.status_code == 303 and response.headers["Location"].endswith("/page/login")


# --- task logs ----------------------------------------------------------------------------

def write_log(app, relative: str, text: str) -> str:
    path = os.path.join(app.extensions["qlshadow"].log_dir, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def test_the_last_lines_of_the_latest_log_are_on_the_cron_page_escaped(app, page, feed, make_cron,
                                                                      auth):
    now = int(time.time())
    cron = make_cron(name="noisy", schedule="0 0 1 1 *")["id"]
    lines = [f"step {n}" for n in range(1, 26)] + ["<script>alert('x')</script> & done"]
    write_log(app, "noisy/old.log", "old run\n")
    write_log(app, "noisy/new.log", "\n".join(lines) + "\n")
    feed.run(cron, now - 600, log="noisy/old.log")
    feed.run(cron, now - 300, code=1, log="noisy/new.log")
    html = html_of(page, f"/page/crons/{cron}")
    assert "<script>" not in html
    log = html.split('<pre class="log">')[1].split("</pre>")[0]
    assert log.splitlines() == [f"step {n}" for n in range(7, 26)] + [
        "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; done"]
    assert "old run" not in html and "earlier lines are not shown" in html
    run = page.get(f"/open/runs?cron_id={cron}", headers=auth).get_json()["data"][0]
    run_html = html_of(page, f"/page/runs/{run['id']}")
    assert "&lt;script&gt;" in run_html and "<script>" not in run_html


def test_a_long_log_is_read_only_from_its_end(app, page, feed, make_cron):
    from qlshadow.web.overview import LOG_BYTES
    cron = make_cron(name="chatty", schedule="0 0 1 1 *")["id"]
    write_log(app, "chatty/a.log", "SECRET-START " + "x" * (4 * LOG_BYTES) + "\nlast line\n")
    feed.run(cron, int(time.time()) - 60, log="chatty/a.log")
    html = html_of(page, f"/page/crons/{cron}")
    log = html.split('<pre class="log">')[1].split("</pre>")[0]
    assert log == "last line" and "SECRET-START" not in html


def test_a_log_path_that_leaves_the_log_directory_shows_a_sentence_not_the_file(
        app, page, feed, make_cron, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("PRIVATE CONTENT\n")
    log_dir = app.extensions["qlshadow"].log_dir
    os.makedirs(os.path.join(log_dir, "evil"), exist_ok=True)
    os.symlink(outside, os.path.join(log_dir, "evil", "link.log"))
    cron = make_cron(name="evil", schedule="0 0 1 1 *")["id"]
    feed.run(cron, int(time.time()) - 60, log="evil/link.log")
    html = html_of(page, f"/page/crons/{cron}")
    assert "PRIVATE CONTENT" not in html and "The log cannot be read:" in html


# --- the gate and the health page ---------------------------------------------------------

def test_the_gate_page_puts_the_verdict_first_and_its_table_turns_into_cards(page, feed,
                                                                            make_cron):
    cron = make_cron(name="gated", schedule="*/5 * * * *")["id"]
    backdate(cron, 3600)
    html = html_of(page, "/page/gate")
    assert html.index('id="verdict"') < html.index("<table")
    table = html.split("<table")[1]
    assert table.startswith(' class="cards"')
    assert 'data-label="Verdict"' in table and 'data-label="Reasons"' in table


def test_the_health_page_is_in_words_and_units(page, backend):
    html = html_of(page, "/page/health")
    main = html.split("<main>")[1].split("</main>")[0]
    assert "True" not in main and "False" not in main
    for raw in ("db_bytes", "wal_bytes", "free_bytes", "last_write", "shadow_origins"):
        assert raw not in main
    assert "<dt>Database</dt>" in main and "<dt>Free on the data partition</dt>" in main
    assert re.search(r"<dt>Free on the data partition</dt><dd>[\d.]+ (KiB|MiB|GiB)</dd>", main)
    budget = re.search(r"<dt>Storage budget</dt><dd>([^<]+)</dd>", main).group(1)
    if backend == "sqlite":
        assert re.fullmatch(r"[\d.]+ (B|KiB|MiB) of 6\.0 MiB \(\d+ %\)", budget)
        assert re.search(r"<dt>Database file</dt><dd>[\d.]+ (KiB|MiB)</dd>", main)
    else:
        assert budget.startswith("not measured")
    assert '<span class="ok">succeeding</span>' in main


def test_the_health_page_shows_the_notification_log(page, feed, make_cron):
    assert "No alerts yet" in html_of(page, "/page/health")
    cron = make_cron(name="<b>backup</b>")["id"]
    feed.run(cron, 1767225600, code=3)  # a failing finish: one alert event, no channel set
    table = html_of(page, "/page/health").split('id="notifications"')[1]
    assert f'<a href="/page/crons/{cron}">&lt;b&gt;backup&lt;/b&gt;</a>' in table
    assert '<span class="failed">failed</span>' in table
    assert "not sent: no channel configured" in table and "<b>backup" not in table


# --- time zones -----------------------------------------------------------------------------

@pytest.fixture
def shanghai(box_zone):
    """The box's zone set to China Standard Time (UTC+8, no DST) for this test."""
    box_zone("CST-8")


def test_times_are_in_the_boxs_zone_named_and_in_utc_on_request(page, feed, make_cron, shanghai):
    cron = make_cron(name="zoned", schedule="0 0 1 1 *")["id"]
    at = 1764597900  # 2025-12-01 14:05 UTC
    feed.run(cron, at)
    html = html_of(page, f"/page/crons/{cron}")
    assert "2025-12-01 22:05 CST" in html and "times in CST" in html
    assert "2025-12-01 14:05 UTC" not in html
    html = html_of(page, f"/page/crons/{cron}?tz=utc")
    assert "<dt>Last start</dt><dd>2025-12-01 14:05 UTC</dd>" in html
    assert '<th scope="row">2025-12-01 14:05 UTC</th>' in html and "times in UTC" in html
    # Links made on a UTC page keep UTC; the toggle goes back to the box's zone.
    assert 'href="/page/?tz=utc"' in html
    assert f'href="/page/crons/{cron}?tz=local">show the box\'s local time</a>' in html


def test_a_box_on_utc_offers_no_other_zone(page, make_cron, utc_box):
    cron = make_cron(name="plain")["id"]
    html = html_of(page, f"/page/crons/{cron}")
    assert "times in UTC" in html and "show UTC" not in html and "tz=" not in html


def test_the_zone_toggle_keeps_the_rest_of_the_query(page, make_cron, shanghai):
    for name in ("a", "b", "c"):
        make_cron(name=name)
    html = html_of(page, "/page/?size=2&page=2")
    assert 'href="/page/?size=2&amp;page=2&amp;tz=utc">show UTC</a>' in html
    html = html_of(page, "/page/?size=2&tz=utc")
    assert 'href="/page/?page=2&amp;size=2&amp;tz=utc" rel="next"' in html


@pytest.mark.parametrize("shadow_env", [{}])
def test_with_shadow_off_executions_are_not_called_manual(page, feed, make_cron):
    cron = make_cron(name="plain", schedule="0 0 1 1 *")["id"]
    feed.run(cron, int(time.time()) - 60)
    feed.run(cron, int(time.time()) - 30, scheduled=False)
    html = html_of(page, f"/page/crons/{cron}")
    table = html.split('id="executions"')[1].split("</table>")[0]
    assert table.count('<span class="muted">crond or manual</span>') == 2
    assert ">manual<" not in table and "Shadow is off" in table
