"""The status page in a real browser: Debian's chromium, headless, JavaScript off, against a
real `qlshadow serve`. Screenshots of every page go to tests/artifacts/page/<backend>/."""
from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from conftest import ROOT, SHADOW_ON, STATUS_PATH, cli_env, http, run_cli

# It drives a real browser.
pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = os.path.join(ROOT, "tests", "artifacts", "page")
EID = "legacy-system:{s}:{n:08x}-9d4a-4e6b-8f1a-2c3d4e5f6a7b"


@pytest.fixture
def browser():
    """Headless chromium driven through its own chromedriver; nothing is downloaded."""
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
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def follow(driver, element) -> None:
    """Click a link or button and wait until the next page has replaced this one."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
    page = driver.find_element("tag name", "html")
    element.click()
    WebDriverWait(driver, 20).until(expected_conditions.staleness_of(page))
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_cdp_cmd("Runtime.evaluate", {"expression": "document.readyState",
                                                          "returnByValue": True})
        ["result"].get("value") == "complete")


def shot(driver, backend: str, name: str) -> None:
    """Save a full-page screenshot as a test artefact."""
    directory = os.path.join(ARTIFACTS, backend)
    os.makedirs(directory, exist_ok=True)
    layout = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    width = layout["cssLayoutViewport"]["clientWidth"]
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": max(400, int(layout["cssContentSize"]["height"])),
        "deviceScaleFactor": 1, "mobile": width < 600})
    driver.save_screenshot(os.path.join(directory, name + ".png"))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.fixture
def populated(live_server, make_settings):
    """A Shadow-on server with two crons, their runs, and an app that may sign in."""
    server = live_server(**SHADOW_ON)
    env = cli_env(make_settings(**SHADOW_ON))
    viewer = json.loads(run_cli(env, "app", "create", "operator", "--scopes", "crons,runs").stdout)
    crons = {}
    for name, schedule in (("nightly-backup", "30 2 * * *"), ("sync-feeds", "*/15 * * * *")):
        status, body = http("POST", server.url + "/open/crons",
                            {"name": name, "command": f"task {name}.sh", "schedule": schedule},
                            {**server.headers, "Content-Type": "application/json"})
        assert status == 200, body
        crons[name] = body["data"]["id"]
    first = int(time.time()) - 8 * 900  # eight runs a quarter of an hour apart, up to now
    for n, code in enumerate((0, 0, 1, 0, 0, 2, 0, 0)):
        for cron in crons.values():
            eid = EID.format(s=first + n * 900, n=n * 10 + cron)
            for status in (0, 1):
                answer = http("PUT", server.url + STATUS_PATH, {
                    "ids": [cron], "status": status, "pid": 300 + n, "exit_code": code,
                    "last_execution_time": first + n * 900, "last_running_time": 40 + n,
                    "execution_id": eid}, {**server.headers, "Content-Type": "application/json"})
                assert answer[0] == 200, answer
    return server, viewer, crons


def test_an_operator_signs_in_sees_crons_runs_gate_and_health_then_signs_out(
        browser, populated, backend):
    from selenium.webdriver.common.by import By
    server, viewer, crons = populated
    shutil.rmtree(os.path.join(ARTIFACTS, backend), ignore_errors=True)

    browser.get(server.url + "/page/")
    assert browser.current_url.endswith("/page/login")
    assert "nightly-backup" not in browser.page_source
    shot(browser, backend, "1-login")

    browser.find_element(By.ID, "client_id").send_keys(viewer["client_id"])
    browser.find_element(By.ID, "client_secret").send_keys(viewer["client_secret"])
    follow(browser, browser.find_element(By.CSS_SELECTOR, "form button[type=submit]"))
    assert browser.current_url.endswith("/page/")
    cookie = browser.get_cookie("qlshadow_page")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expiry"]
    table = browser.find_element(By.CSS_SELECTOR, "main table")
    assert "nightly-backup" in table.text and "every day at 02:30" in table.text
    assert "every 15 minutes" in table.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.strip rect.failed")) == 4
    shot(browser, backend, "2-crons")

    follow(browser, browser.find_element(By.LINK_TEXT, "nightly-backup"))
    assert browser.current_url.endswith(f"/page/crons/{crons['nightly-backup']}")
    runs = browser.find_element(By.XPATH, "//h2[@id='runs']/following-sibling::div[1]//table")
    assert len(runs.find_elements(By.CSS_SELECTOR, "tbody tr")) == 8
    assert "exited" in runs.text
    instances = browser.find_element(By.XPATH, "//h2[@id='instances']/following-sibling::div[1]//table")
    assert len(instances.find_elements(By.CSS_SELECTOR, "tbody tr")) == 8
    shot(browser, backend, "3-cron")

    follow(browser, browser.find_element(By.LINK_TEXT, "Gate"))
    heading = browser.find_element(By.TAG_NAME, "h1").text
    assert heading == "Reconciliation gate"
    assert ("Verdict:" in browser.page_source
            or "The gate is not available in this build." in browser.page_source)
    shot(browser, backend, "4-gate")

    follow(browser, browser.find_element(By.LINK_TEXT, "Health"))
    assert browser.find_element(By.XPATH, "//dt[text()='db']/following-sibling::dd[1]").text == "ok"
    shot(browser, backend, "5-health")

    browser.set_window_size(390, 844)  # a phone, in dark mode
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    follow(browser, browser.find_element(By.LINK_TEXT, "Crons"))
    shot(browser, backend, "6-crons-phone-dark")
    follow(browser, browser.find_element(By.LINK_TEXT, "sync-feeds"))
    shot(browser, backend, "7-cron-phone-dark")
    browser.set_window_size(1280, 900)

    follow(browser, browser.find_element(By.XPATH, "//button[text()='Sign out']"))
    assert browser.current_url.endswith("/page/login")
    assert browser.get_cookie("qlshadow_page") is None
    browser.get(server.url + f"/page/crons/{crons['nightly-backup']}")
    assert browser.current_url.endswith("/page/login")
    assert "nightly-backup" not in browser.page_source
