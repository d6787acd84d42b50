"""The console in a real browser: headless Chromium (Debian's) driven by selenium, against a
real ``serve --console`` process with API keys, on each backend.

One browser for the module; one server process per backend. Runs are started by raw-socket
clients, so a test can hang up at the moment it chooses.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.test_cli import StderrLog, start, stop

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (scripts/install-system-deps)")

LONG_NAME = "nightly-reconciliation-service@agents.example.com"
KEYS = f"alice:alice-key\nbob:bob-key\nops:ops-key\n{LONG_NAME}:long-key\n"
XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    keys = tmp_path_factory.mktemp("console") / "keys"
    keys.write_text(KEYS)
    proc, url, log = start("--backend", request.param, "--agent", "tests.console_agents:ticking",
                           "--console", "--console-operator", "ops", "--api-keys", str(keys),
                           "--grace", "1")
    try:
        yield url
    finally:
        _stop(proc, log)


def _stop(proc: Any, log: StderrLog) -> None:
    stop(proc, log)


class StreamingRun:
    """A ``SendStreamingMessage`` held open on a raw socket; :meth:`hang_up` drops it."""

    def __init__(self, url: str, key: str, text: str) -> None:
        host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()  # type: ignore[union-attr]
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                           "params": {"message": {"messageId": f"m{time.monotonic_ns()}",
                                                  "role": "ROLE_USER",
                                                  "parts": [{"text": text}]}}}).encode()
        self.sent_at = time.monotonic()
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(
            b"POST / HTTP/1.1\r\nHost: " + f"{host}:{port}".encode() + b"\r\nX-API-Key: "
            + key.encode() + b"\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        self.received = b""
        while (found := re.search(rb'"task":\{"id":"([^"]+)"', self.received)) is None:
            chunk = self.sock.recv(65536)
            assert chunk, self.received
            self.received += chunk
        self.task_id = found.group(1).decode()

    def read_until(self, pattern: bytes, timeout: float = 10) -> None:
        self.sock.settimeout(timeout)
        while not re.search(pattern, self.received):
            chunk = self.sock.recv(65536)
            assert chunk, self.received
            self.received += chunk

    def hang_up(self) -> None:
        self.sock.close()


def login(browser: Any, url: str, key: str) -> None:
    browser.delete_all_cookies()
    browser.get(url + "console")
    field = WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "credential"))
    field.send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    WebDriverWait(browser, 10).until(
        lambda b: "live" in b.find_element(By.ID, "connection").text)
    browser.get_log("browser")  # the 401 of the login page itself is expected


def row(browser: Any, table: str, task_id: str) -> Any:
    found = browser.find_elements(By.CSS_SELECTOR, f"#{table}-body tr[data-task-id='{task_id}']")
    return found[0] if found else None


def severe(browser: Any) -> list[Any]:
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_page_refused_without_credential(browser: Any, server: str) -> None:
    assert httpx.get(server + "console").status_code == 401
    assert httpx.get(server + "console/api/runs").status_code == 401
    browser.delete_all_cookies()
    browser.get(server + "console")
    WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "credential"))
    assert not browser.find_elements(By.ID, "live-body")  # the login form only: no data
    browser.find_element(By.ID, "credential").send_keys("wrong-key")
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    error = WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "login-error").text and b.find_element(By.ID,
                                                                              "login-error"))
    assert "authentication required" in error.text
    browser.get_log("browser")


def test_live_run_timeline_markup_and_hang_up(browser: Any, server: str) -> None:
    login(browser, server, "alice-key")
    theirs = StreamingRun(server, "bob-key", "bob's run")
    mine = StreamingRun(server, "alice-key", XSS)
    WebDriverWait(browser, 5, poll_frequency=0.05).until(
        lambda b: row(b, "live", mine.task_id))
    appeared = time.monotonic() - mine.sent_at
    assert appeared < 1.0, f"the run appeared after {appeared:.2f} s"
    live = row(browser, "live", mine.task_id)
    assert "stream 1" in live.find_element(By.CSS_SELECTOR, "td.holders").text
    assert live.find_element(By.CSS_SELECTOR, "td.mode").text == "interactive"
    # The timeline: the message as text, and trajectory events arriving live.
    live.find_element(By.CSS_SELECTOR, "button.link").click()
    items = "#tl-items li[data-kind='trajectory']"
    WebDriverWait(browser, 5).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, items)) >= 2)
    seen = len(browser.find_elements(By.CSS_SELECTOR, items))
    WebDriverWait(browser, 5).until(
        lambda b: len(b.find_elements(By.CSS_SELECTOR, items)) >= seen + 3)
    created = browser.find_element(By.CSS_SELECTOR, "#tl-items li[data-kind='created'] pre")
    assert created.text == XSS
    assert not browser.find_elements(By.CSS_SELECTOR, "#timeline img, main img")
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text
    # Another owner's run is not shown to alice (it is live now).
    assert row(browser, "live", theirs.task_id) is None
    # A hang-up: the run ends with reason hang-up, on the list and on the timeline.
    mine.hang_up()
    WebDriverWait(browser, 5).until(lambda b: row(b, "ended", mine.task_id))
    ended = row(browser, "ended", mine.task_id)
    assert ended.find_element(By.CSS_SELECTOR, "td.reason").text == "hang-up"
    assert row(browser, "live", mine.task_id) is None
    WebDriverWait(browser, 5).until(lambda b: b.find_elements(
        By.CSS_SELECTOR, "#tl-items li[data-kind='run']")[-1:] and "reason hang-up" in b
        .find_elements(By.CSS_SELECTOR, "#tl-items li[data-kind='run']")[-1].text)
    theirs.hang_up()
    assert severe(browser) == []


def test_cancel_button_ends_a_run(browser: Any, server: str) -> None:
    login(browser, server, "alice-key")
    run = StreamingRun(server, "alice-key", "cancel me")
    WebDriverWait(browser, 5, poll_frequency=0.05).until(lambda b: row(b, "live", run.task_id))
    row(browser, "live", run.task_id).find_element(By.CSS_SELECTOR, "button.cancel").click()
    WebDriverWait(browser, 5).until(lambda b: row(b, "ended", run.task_id))
    reason = row(browser, "ended", run.task_id).find_element(By.CSS_SELECTOR, "td.reason").text
    assert reason == "CancelTask (by alice)"
    # The client that started it sees the cancellation, recorded with who asked.
    run.read_until(rb"TASK_STATE_CANCELED")
    run.read_until(rb"by alice")
    run.hang_up()
    assert severe(browser) == []


def test_at_1280_px_the_live_table_fits_and_it_waits_for_its_feed(browser: Any,
                                                                  server: str) -> None:
    """At 1280 x 900 the in-flight table scrolled sideways and its State and Cancel columns
    were off-screen; they fit now. Loaded before its live feed connects, the page said "No run
    in flight." while runs were live; it says it is connecting until the feed has answered."""
    browser.set_window_size(1280, 900)
    run = StreamingRun(server, "alice-key", "a run to show")
    # A detached run beside it, as wide as real ones get: a long principal, a tenant, the
    # "detached (why)" mode.
    long_key = {"X-API-Key": "long-key", "A2A-Version": "1.0"}
    detached = httpx.post(server + "eu-west-production-tenant/message:send", headers=long_key,
                          json={"message": {"messageId": f"d{time.monotonic_ns()}",
                                            "role": "ROLE_USER", "parts": [{"text": "detached"}]},
                                "configuration": {"returnImmediately": True}}).json()
    detached_id = detached["task"]["id"]
    try:
        login(browser, server, "ops-key")  # the operator: every run, owners and all
        WebDriverWait(browser, 5).until(
            lambda b: row(b, "live", run.task_id) and row(b, "live", detached_id))
        width = browser.execute_script("return document.documentElement.clientWidth")
        assert width <= 1280, width
        for task_id in (run.task_id, detached_id):
            live = row(browser, "live", task_id)
            for cell in ("td.state", "button.cancel"):
                right = browser.execute_script(
                    "return arguments[0].getBoundingClientRect().right",
                    live.find_element(By.CSS_SELECTOR, cell))
                assert right <= width, (cell, right, width)
        scroll = browser.execute_script(
            "const s = document.getElementById('live'); return [s.scrollWidth, s.clientWidth]")
        assert scroll[0] <= scroll[1], scroll  # no sideways scrolling
        # The feed blocked: the page must not claim that nothing is in flight.
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*runs/stream*"]})
        try:
            browser.get(server + "console")
            WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "who").text)
            time.sleep(0.5)  # time enough for a feed that would have connected
            empty = browser.find_element(By.ID, "live-empty")
            assert empty.is_displayed() and "connecting" in empty.text.lower(), empty.text
            assert "No run in flight" not in empty.text
        finally:
            browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
        browser.get(server + "console")
        WebDriverWait(browser, 10).until(lambda b: row(b, "live", run.task_id))
        assert not browser.find_element(By.ID, "live-empty").is_displayed()
    finally:
        run.hang_up()
        httpx.post(server + f"eu-west-production-tenant/tasks/{detached_id}:cancel",
                   headers=long_key, json={})
        browser.set_window_size(1400, 1000)
    browser.get_log("browser")  # the blocked feed's errors are this test's own
