"""The status page in a real browser: Debian's chromium, headless, JavaScript off, against a
real `qlshadow serve`. Every page at phone (390x844) and desktop (1366x900) width, and in
Chinese at phone width; the screenshots go to $QL_ARTEFACTS/<backend>/ (default: the test's tmp dir)."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import pytest

from helpers import SHADOW_ON, STATUS_PATH, cli_env, http, run_cli

# It drives a real browser.
pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
EID = "legacy-system:{s}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


@pytest.fixture
def browser():
    """Headless chromium driven through its own chromedriver; nothing is downloaded. Its
    temp files (the profile, the singleton socket's folder, which a quit leaves behind)
    go in a folder of this test's, removed after it (short: a socket path has a limit)."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/run installs them)")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--no-first-run", "--window-size=1280,900"):
        options.add_argument(arg)
    # The page must work without scripts: the browser runs with JavaScript off.
    options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    browser_tmp = tempfile.mkdtemp(prefix="qlshadow-browser-")
    try:
        service = Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": browser_tmp})
        driver = webdriver.Chrome(options=options, service=service)
        driver.set_page_load_timeout(30)
        yield driver
        driver.quit()
    finally:
        shutil.rmtree(browser_tmp, ignore_errors=True)


def follow(driver, element) -> None:
    """Click a link or button and wait until the next page has replaced this one.

    The old page is told apart from the next by a mark set on its window through the
    driver: an element reference of the old page can fail in other ways than "stale"
    while the browser swaps documents, a window's mark just disappears with it."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait
    driver.execute_cdp_cmd("Runtime.evaluate", {"expression": "window.qlshadowOldPage = 1"})
    element.click()

    def next_page_loaded(d) -> bool:
        try:
            answer = d.execute_cdp_cmd("Runtime.evaluate", {
                "expression": "!window.qlshadowOldPage && document.readyState",
                "returnByValue": True})
        except WebDriverException:
            return False  # the documents are being swapped: ask again
        return answer["result"].get("value") == "complete"
    WebDriverWait(driver, 20).until(next_page_loaded)


PHONE, DESKTOP = (390, 844), (1366, 900)


def evaluate(driver, expression: str):
    """A value computed in the page (JavaScript is off for the page, not for the driver)."""
    answer = driver.execute_cdp_cmd("Runtime.evaluate", {"expression": expression,
                                                         "returnByValue": True})
    return answer["result"].get("value")


def viewport(driver, size: tuple, dark: bool = False) -> None:
    """Emulate a screen of size (CSS pixels); a phone also gets the mobile viewport rules."""
    width, height = size
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})


def shot(driver, directory: str, name: str, size: tuple) -> str:
    """Save a full-page screenshot as a test artefact; the viewport is set back after."""
    os.makedirs(directory, exist_ok=True)
    height = int(evaluate(driver, "document.documentElement.scrollHeight") or size[1])
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": size[0], "height": max(size[1], min(height, 6000)), "deviceScaleFactor": 1,
        "mobile": size[0] < 600})
    path = os.path.join(directory, name + ".png")
    driver.save_screenshot(path)
    viewport(driver, size, dark=bool(evaluate(
        driver, "matchMedia('(prefers-color-scheme: dark)').matches")))
    return path


@pytest.fixture
def artefacts(tmp_path, backend) -> str:
    """Where screenshots go: $QL_ARTEFACTS/<backend>, else the test's own tmp dir."""
    base = os.environ.get("QL_ARTEFACTS") or str(tmp_path / "artefacts")
    directory = os.path.join(base, backend)
    shutil.rmtree(directory, ignore_errors=True)
    return directory


@pytest.fixture
def populated(live_server, make_settings):
    """A Shadow-on server with crons that succeed, fail, miss firings and hang, runs with
    logs (one holding markup), a manual run, and an app that may sign in."""
    from qlshadow.storage import db
    from qlshadow.storage.models import Cron, RunningInstance, ShadowRun
    from qlshadow.web.views import create_app
    settings = make_settings(**SHADOW_ON)
    # The box keeps China Standard Time (UTC+8): the page names it and offers UTC.
    server = live_server(**SHADOW_ON, TZ="CST-8")
    env = cli_env(settings)
    viewer = json.loads(run_cli(env, "app", "create", "operator", "--scopes", "crons,runs").stdout)
    headers = {**server.headers, "Content-Type": "application/json"}
    crons = {}
    for name, schedule in (("nightly-backup", "30 2 * * *"), ("sync-feeds", "*/15 * * * *"),
                           ("hung-export", "0 4 * * *")):
        status, body = http("POST", server.url + "/open/crons",
                            {"name": name, "command": f"task {name}.sh", "schedule": schedule},
                            headers)
        assert status == 200, body
        crons[name] = body["data"]["id"]
    log_dir = os.path.join(settings.data_dir, "log", "sync-feeds")
    os.makedirs(log_dir, exist_ok=True)

    def send(cron, status, n, at, code=0, eid=True, log=None):
        body = {"ids": [cron], "status": status, "pid": 300 + n, "exit_code": code,
                "last_execution_time": at, "last_running_time": 40 + n}
        if eid:
            body["execution_id"] = EID.format(s=at, n=n * 10 + cron)
        if log:
            body["log_path"] = log
        answer = http("PUT", server.url + STATUS_PATH, body, headers)
        assert answer[0] == 200, answer

    now = int(time.time())
    base = now // 900 * 900  # sync-feeds' newest firing
    for n, code in enumerate((0, 0, 1, 0, 0, 2, 0, 0)):
        at = base - (8 - n) * 900 + 2
        if n == 4:
            continue  # a firing with no record: a gap in the strip
        log = f"sync-feeds/run-{n}.log"
        with open(os.path.join(settings.data_dir, "log", log), "w") as fh:
            fh.write("".join(f"fetched feed {k} of 30\n" for k in range(1, 31)))
            fh.write("<script>alert('page')</script> & done\n")
        for cron in (crons["nightly-backup"], crons["sync-feeds"]):
            for status in (0, 1):
                send(cron, status, n, at, code, log=log)
    send(crons["sync-feeds"], 0, 9, base + 1, log="sync-feeds/run-7.log")
    send(crons["sync-feeds"], 1, 9, base + 1, log="sync-feeds/run-7.log")
    for status in (0, 1):  # a manual run: no execution id
        send(crons["nightly-backup"], status, 20, now - 100, eid=False)
    send(crons["hung-export"], 0, 30, now - 3 * 3600)  # started 3 h ago, never finished
    # sync-feeds has been on the schedule for 2 h 10 min: its firings are judged.
    create_app(settings)
    with db.database.connection_context(), db.write_transaction():
        Cron.update(created_at=base - 8 * 900 - 60, updated_at=base - 8 * 900 - 60).where(
            Cron.id == crons["sync-feeds"]).execute()
        # Each earlier run took 40 s (a finish callback is dated by the server's clock, which
        # would make them all last until now, and crond skip every firing in between).
        RunningInstance.update(finished_at=RunningInstance.started_at + 40).where(
            RunningInstance.finished_at.is_null(False)
            & (RunningInstance.started_at < now - 600)).execute()
        ShadowRun.update(finished_at=ShadowRun.accepted_at + 40).where(
            ShadowRun.finished_at.is_null(False) & (ShadowRun.accepted_at < now - 600)).execute()
    db.discard_connection()
    status, runs = http("GET", server.url + f"/open/runs?cron_id={crons['sync-feeds']}",
                        headers=server.headers)
    return server, viewer, crons, runs["data"][0]["id"]


def assert_fits_a_phone(driver, page: str) -> None:
    """Nothing wider than the screen: the page never scrolls sideways. A mobile browser
    widens its layout viewport (innerWidth) to overflowing content, so the screen's own
    width is checked too."""
    widths = evaluate(driver, "[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= min(widths[1], PHONE[0]), f"{page} overflows at phone width: {widths}"


def test_every_page_at_phone_and_desktop_width(browser, populated, artefacts):
    from selenium.webdriver.common.by import By
    server, viewer, crons, run_id = populated

    # A browser at / is led to the page, which asks for sign-in first.
    viewport(browser, DESKTOP)
    browser.get(server.url + "/")
    assert browser.current_url.endswith("/page/login")
    assert "nightly-backup" not in browser.page_source
    shot(browser, artefacts, "login-desktop", DESKTOP)
    viewport(browser, PHONE)
    browser.get(server.url + "/page/login")
    assert_fits_a_phone(browser, "login")
    shot(browser, artefacts, "login-phone", PHONE)

    viewport(browser, DESKTOP)
    browser.find_element(By.ID, "client_id").send_keys(viewer["client_id"])
    browser.find_element(By.ID, "client_secret").send_keys(viewer["client_secret"])
    follow(browser, browser.find_element(By.CSS_SELECTOR, "form button[type=submit]"))
    assert browser.current_url.endswith("/page/")
    cookie = browser.get_cookie("qlshadow_page")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expiry"]

    pages = {"crons": "/page/", "cron": f"/page/crons/{crons['sync-feeds']}",
             "run": f"/page/runs/{run_id}", "gate": "/page/gate", "health": "/page/health",
             "missing": "/page/crons/999999"}
    for name, path in pages.items():
        for label, size, dark in (("desktop", DESKTOP, False), ("phone", PHONE, False),
                                  ("phone-dark", PHONE, True)):
            viewport(browser, size, dark)
            browser.get(server.url + path)
            assert "/page/login" not in browser.current_url
            if size == PHONE:
                assert_fits_a_phone(browser, name)
            if name == "gate" and size == PHONE:
                bottom = evaluate(browser, "document.getElementById('verdict')"
                                           ".getBoundingClientRect().bottom")
                assert bottom is not None and bottom <= PHONE[1], bottom
            shot(browser, artefacts, f"{name}-{label}", size)

    viewport(browser, DESKTOP)
    browser.get(server.url + "/page/")
    table = browser.find_element(By.CSS_SELECTOR, "main table")
    names = [a.text for a in table.find_elements(By.CSS_SELECTOR, "tbody th a")]
    assert names[0] == "hung-export"  # stuck: a problem, so first
    assert browser.find_elements(By.CSS_SELECTOR, "svg.strip rect.missed")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.strip rect.stuck")
    assert "every day at 02:30" in table.text and "every 15 minutes" in table.text

    follow(browser, browser.find_element(By.LINK_TEXT, "nightly-backup"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#executions + div table tbody tr")
    assert len(rows) == 8  # seven scheduled, one manual: one row each
    assert len(browser.find_elements(By.XPATH, "//span[text()='manual']")) == 1

    browser.get(server.url + pages["cron"])
    log = browser.find_element(By.CSS_SELECTOR, "pre.log").text
    assert log.endswith("<script>alert('page')</script> & done")
    follow(browser, browser.find_element(By.CSS_SELECTOR, f"a[href='/page/runs/{run_id}']"))
    assert run_id in browser.find_element(By.TAG_NAME, "h1").text

    # In Chinese: the footer's link chooses it, a cookie keeps it on the pages that follow.
    follow(browser, browser.find_element(By.LINK_TEXT, "中文"))
    assert "lang=zh_CN" in browser.current_url
    assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == "zh-CN"
    for name, path in pages.items():
        viewport(browser, PHONE)
        browser.get(server.url + path)
        assert "/page/login" not in browser.current_url
        assert_fits_a_phone(browser, name + " in Chinese")
        shot(browser, artefacts, f"{name}-phone-zh", PHONE)
    browser.get(server.url + "/page/")
    main = browser.find_element(By.TAG_NAME, "main").text
    assert "定时任务" in main and "每天 02:30" in main and "每 15 分钟" in main
    assert browser.find_element(By.XPATH, "//nav//a[text()='健康状态']")
    follow(browser, browser.find_element(By.LINK_TEXT, "English"))
    viewport(browser, DESKTOP)
    browser.get(server.url + pages["run"])

    follow(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "show UTC"))
    assert "?tz=utc" in browser.current_url and "times in UTC" in browser.page_source

    follow(browser, browser.find_element(By.XPATH, "//button[text()='Sign out']"))
    assert browser.current_url.endswith("/page/login?tz=utc")  # the choice of zone stays
    assert browser.get_cookie("qlshadow_page") is None
    browser.get(server.url + f"/page/crons/{crons['nightly-backup']}")
    assert browser.current_url.endswith("/page/login")
    assert "nightly-backup" not in browser.page_source
