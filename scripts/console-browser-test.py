#!/usr/bin/env python3
"""The operator console in a real browser (Debian's chromium and chromedriver, Selenium).

Starts a real `dispatcher run` with FLEET_CONSOLE=on and a `fleet-drill` worker against
DATABASE_URL (a database of its own), then, as a person would:
  - logs in with a read token: the pages show, and no action button is there;
  - makes a dead job from a failing drill job whose payload and error carry XSS payloads: shown
    as text, no dialog opens, no <img> is made;
  - logs in with an operate token, pauses drill.script (the worker stops claiming it: the
    retried job stays available), retries the dead group (confirmation with its count, then the
    count retried), and watches the job page turn `completed` without a reload once resumed;
  - a POST without the CSRF token is refused (403) and changes nothing;
  - the session cookie is not readable by script (HttpOnly);
  - a render failed by the fleet's own settings (a `render-worker` without the key of the
    provider `render.provider` names, the issue's scenario) shows its failure code and reason on
    the Renders page, and its `render.run` job is dead, in red, on the Dead page.
Screenshots of each page go to .data/console/ (docs/console.md shows some).

Environment: DISPATCHER_BIN_DIR (the built executables), DATABASE_URL (an empty database).
Prints 'N passed, N failed' last; exits 1 on any failure.
"""
import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BIN_DIR = os.environ["DISPATCHER_BIN_DIR"]
DATABASE_URL = os.environ["DATABASE_URL"]
SCREENSHOTS = os.environ.get("CONSOLE_SCREENSHOTS", ".data/console")
XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMAGE = '"><img src=x onerror=alert(2)>'

passed, failed = 0, 0


def check(condition, what):
    global passed, failed
    if condition:
        passed += 1
        print(f"ok   {what}", flush=True)
    else:
        failed += 1
        print(f"FAIL {what}", flush=True)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Fleet:
    """A dispatcher with the console on and a drill worker, on loopback ports of their own."""

    def __init__(self, work):
        self.http_port = free_port()
        self.socket = os.path.join(work, "dispatcher.sock")
        base = dict(os.environ, DATABASE_URL=DATABASE_URL, FLEET_LOG_LEVEL="error")
        self.env = dict(base, FLEET_CONSOLE="on", FLEET_HTTP_ADDRESS=f"127.0.0.1:{self.http_port}",
                        FLEET_DISPATCHER_TCP=f"127.0.0.1:{free_port()}", FLEET_DISPATCHER_SOCKET=self.socket,
                        FLEET_DISPATCHER_TOKEN=secrets.token_hex(24))
        self.logs = open(os.path.join(work, "fleet.log"), "wb")
        self.dispatcher = subprocess.Popen([os.path.join(BIN_DIR, "dispatcher"), "run"], env=self.env,
                                           stdout=self.logs, stderr=self.logs)
        self.wait_ready()
        self.worker = subprocess.Popen([os.path.join(BIN_DIR, "fleet-drill")], env=dict(base, FLEET_POLL_INTERVAL_MS="200"),
                                       stdout=self.logs, stderr=self.logs)
        self.base = f"http://127.0.0.1:{self.http_port}"

    def wait_ready(self):
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self.dispatcher.poll() is not None:
                raise RuntimeError("the dispatcher exited at start (see its log)")
            time.sleep(0.3)
        raise RuntimeError("the dispatcher was not ready within 120 s")

    def cli(self, *args):
        return subprocess.check_output([os.path.join(BIN_DIR, "dispatcher"), *args], env=self.env, text=True).strip()

    def ask(self, *args):
        """An operator command over the Unix socket, its JSON answer."""
        return json.loads(self.cli(*args, "--dispatcher", self.socket))

    def sql(self, statement):
        subprocess.check_call(["psql", DATABASE_URL, "-q", "-v", "ON_ERROR_STOP=1", "-c", statement])

    def fail_a_render(self, work, render_id):
        """A render at fal-fashn run by a render worker that has no FAL_KEY: it fails
        PROVIDER_MISCONFIGURED, as on a deployment missing the secret. Returns the render."""
        self.sql("UPDATE fleet_settings SET value = '\"fal-fashn\"' WHERE key = 'render.provider'")
        self.sql("INSERT INTO credits (user_id, total_granted) VALUES ('console-user', 1)")
        environment = {k: v for k, v in os.environ.items() if not k.startswith("FAL_")}
        worker = subprocess.Popen([os.path.join(BIN_DIR, "render-worker")],
                                  env=dict(environment, DATABASE_URL=DATABASE_URL, FLEET_LOG_LEVEL="error",
                                           FLEET_STORAGE_ROOT=os.path.join(work, "images"), FLEET_HTTP_ADDRESS="off"),
                                  stdout=self.logs, stderr=self.logs)
        try:
            # The dispatcher reads the provider setting every few milliseconds: until it has, a
            # request may still go to the old provider, so ask until one goes to fal-fashn.
            deadline = time.time() + 30
            while True:
                render = self.ask("render", "request", render_id, "--user", "console-user", "--garment", "g1", "--body", "b1",
                                  "--category", "tops")
                if render["provider"] == "fal-fashn" or time.time() > deadline:
                    break
                render_id += "x"
            return self.ask("render", "wait", render["id"], "--timeout", "60")
        finally:
            worker.terminate()
            worker.wait(timeout=30)

    def wait_for_state(self, job_id, state, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.ask("status", str(job_id))["state"] == state:
                return True
            time.sleep(0.3)
        return False

    def stop(self):
        for child in (self.worker, self.dispatcher):
            if child.poll() is None:
                child.terminate()
        for child in (self.worker, self.dispatcher):
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
        self.logs.close()


def browser():
    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    # Debian's driver, named: Selenium must not try to download one (CI reaches package registries only).
    return webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)


def no_dialog(driver):
    try:
        driver.switch_to.alert
        return False
    except NoAlertPresentException:
        return True


def after_click(driver, css, text=None, timeout=15):
    """The element a click's navigation leads to (a click on a form's button does not wait for the POST's page)."""
    def found(d):
        elements = d.find_elements(By.CSS_SELECTOR, css)
        return elements[0] if elements and (text is None or text in elements[0].text) else False
    return live_wait(driver, timeout).until(found)


def live_wait(driver, timeout):
    """A wait on what the live refresh rewrites: an element read between its removal and its
    replacement is stale, which is not a failure but a reason to look again."""
    return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,))


def shot(driver, name):
    os.makedirs(SCREENSHOTS, exist_ok=True)
    driver.save_screenshot(os.path.join(SCREENSHOTS, f"{name}.png"))


def login(driver, fleet, token):
    driver.get(fleet.base + "/console/login")
    driver.find_element(By.NAME, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.login button[type=submit]").click()
    WebDriverWait(driver, 15).until(lambda d: d.current_url.rstrip("/").endswith("/console"))


def logout(driver):
    driver.find_element(By.CSS_SELECTOR, "form.who button[type=submit]").click()
    WebDriverWait(driver, 15).until(lambda d: d.current_url.endswith("/console/login"))


def run(fleet, driver, work):
    read_token = fleet.cli("access-token", "create", "--name", "viewer", "--role", "read")
    operate_token = fleet.cli("access-token", "create", "--name", "ops", "--role", "operate")
    time.sleep(2.5)  # every dispatcher re-reads the token table every 2 s

    # A failing drill job: dead at its first attempt (DRILL_PERMANENT), fine on the next one.
    payload = json.dumps({"permanent": True, "failAttempts": 1, "note": XSS_SCRIPT, "name": XSS_IMAGE})
    job_id = int(fleet.cli("enqueue", "drill.script", "--payload", payload, "--max-attempts", "1", "--dispatcher", fleet.socket))
    check(fleet.wait_for_state(job_id, "dead"), "the failing drill job is dead")
    failed_render = fleet.fail_a_render(work, "r-console")
    check(failed_render["status"] == "failed" and failed_render["failureCode"] == "PROVIDER_MISCONFIGURED",
          f"a render failed by the fleet's settings: {failed_render['status']} {failed_render['failureCode']}")
    check(fleet.wait_for_state(failed_render["jobId"], "dead"), "... and its render.run job is dead")

    # ---- read: sees everything, acts on nothing --------------------------------------------
    login(driver, fleet, read_token)
    check("viewer" in driver.find_element(By.CSS_SELECTOR, ".token").text, "read: logged in as the read token's name")
    check("wb_console" not in driver.execute_script("return document.cookie"), "the session cookie is HttpOnly (no script reads it)")
    cookie = driver.get_cookie("wb_console")
    check(cookie is not None and cookie.get("httpOnly") and cookie.get("sameSite") == "Strict", "the session cookie: HttpOnly, SameSite=Strict")
    shot(driver, "overview")
    driver.get(f"{fleet.base}/console/jobs/{job_id}")
    payload_text = driver.find_element(By.CSS_SELECTOR, "pre.payload").text
    check(XSS_SCRIPT in payload_text and XSS_IMAGE in payload_text, "the XSS payloads are shown as text on the job page")
    check(no_dialog(driver), "no dialog opened on the job page")
    check(not driver.find_elements(By.CSS_SELECTOR, "main img"), "no <img> made from the payload")
    check(not driver.find_elements(By.CSS_SELECTOR, "#retry, #discard, #cancel"), "read: no action button on the job page")
    shot(driver, "job")
    driver.get(f"{fleet.base}/console/dead")
    check("DRILL_PERMANENT" in driver.page_source and no_dialog(driver), "read: the dead group is listed, no dialog")
    check(not driver.find_elements(By.CSS_SELECTOR, "button.retry-group, button.discard-group"), "read: no group button")
    driver.get(f"{fleet.base}/console/queues")
    check(not driver.find_elements(By.CSS_SELECTOR, "main button"), "read: no pause or resume button")
    for page in ("jobs", "workers", "schedule", "renders"):
        driver.get(f"{fleet.base}/console/{page}")
        check(driver.find_element(By.TAG_NAME, "h1").text and no_dialog(driver), f"read: the {page} page shows")
        shot(driver, page)
    driver.get(f"{fleet.base}/console/renders?status=failed")
    row = next((r for r in driver.find_elements(By.CSS_SELECTOR, "main tbody tr") if failed_render["id"] in r.text), None)
    check(row is not None, "the failed render is listed on the Renders page")
    if row is not None:
        check(row.find_element(By.CSS_SELECTOR, "code.failure-code").text == "PROVIDER_MISCONFIGURED"
              and row.find_element(By.CSS_SELECTOR, "span.state").text == "failed",
              "... with its failure code, beside its status")
        reason = row.find_element(By.CSS_SELECTOR, ".failure-reason")
        check("FAL_KEY" in reason.text and reason.is_displayed(), f"... and its reason, visible: {reason.text!r}")
    shot(driver, "renders-failed")
    driver.get(f"{fleet.base}/console/dead")
    dead_group = driver.find_elements(By.CSS_SELECTOR, "tr[data-kind='render.run'][data-code='PROVIDER_MISCONFIGURED']")
    check(len(dead_group) == 1, "the failed render's job is in the Dead page's groups, by its failure code")
    driver.get(f"{fleet.base}/console/jobs/{failed_render['jobId']}")
    state = driver.find_element(By.ID, "job-state")
    red, green, blue = [int(float(v)) for v in state.value_of_css_property("color").split("(")[1].split(")")[0].split(",")[:3]]
    check(state.text == "dead" and red > green and red > blue, f"the failed render's job page says dead, in red (rgb {red}, {green}, {blue})")
    shot(driver, "job-failed-render")
    logout(driver)

    # ---- operate: pause, retry the group, watch the job complete ---------------------------
    login(driver, fleet, operate_token)
    driver.get(f"{fleet.base}/console/queues")
    driver.find_element(By.CSS_SELECTOR, "tr[data-kind='drill.script'] button.pause").click()
    check("Kind drill.script paused." in after_click(driver, "#notice").text, "operate: drill.script paused")
    shot(driver, "queues")

    driver.get(f"{fleet.base}/console/dead")
    shot(driver, "dead")
    driver.find_element(By.CSS_SELECTOR, "tr[data-kind='drill.script'][data-code='DRILL_PERMANENT'] button.retry-group").click()
    question = after_click(driver, "main form.card p").text
    check("Retry 1 dead drill.script job whose last error is DRILL_PERMANENT?" in question, "the group retry asks first, with its count")
    shot(driver, "confirm")
    driver.find_element(By.ID, "confirm").click()
    check("Retried 1 drill.script job (DRILL_PERMANENT)." in after_click(driver, "#notice").text, "the count retried is shown")

    driver.get(f"{fleet.base}/console/jobs/{job_id}")
    driver.execute_script("window.consoleTestMarker = 42")  # gone if the page reloads
    time.sleep(3)  # more than the claim interval and a live refresh
    check(driver.find_element(By.ID, "job-state").text == "available", "paused: the worker does not claim the retried job")
    fleet.ask("resume", "drill.script")
    try:
        live_wait(driver, 30).until(lambda d: d.find_element(By.ID, "job-state").text == "completed")
        completed = True
    except TimeoutException:
        completed = False
    check(completed, "resumed: the job page shows the job completed")
    check(driver.execute_script("return window.consoleTestMarker") == 42, "... without a reload (live refresh)")
    shot(driver, "job-completed")

    driver.get(fleet.base + "/console")
    live_wait(driver, 15).until(lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-kind='drill.script'] td.completed").text != "0")
    shot(driver, "overview")
    driver.get(f"{fleet.base}/console/audit")
    audit = driver.find_element(By.TAG_NAME, "main").text
    check("ops queue.pause" in audit.replace("\t", " ") or ("queue.pause" in audit and "ops" in audit), "the pause is in the audit trail as ops")
    check("jobs.retry" in audit, "the group retry is in the audit trail")
    shot(driver, "audit")

    # ---- a POST without the CSRF token, from outside the page ------------------------------
    session = driver.get_cookie("wb_console")["value"]
    connection = http.client.HTTPConnection("127.0.0.1", fleet.http_port, timeout=10)
    connection.request("POST", "/console/queues/pause", body="kind=drill.noop",
                       headers={"Cookie": f"wb_console={session}", "Content-Type": "application/x-www-form-urlencoded"})
    answer = connection.getresponse()
    answer.read()
    check(answer.status == 403, "a POST without the CSRF token is refused (403)")
    check(not any(p["name"] == "drill.noop" for p in fleet.ask("stats", "--json")["pauses"]), "... and nothing was paused")

    # ---- the look on a phone and in dark mode -----------------------------------------------
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    driver.get(fleet.base + "/console")
    shot(driver, "overview-dark")
    driver.set_window_size(390, 844)
    driver.get(f"{fleet.base}/console/jobs/{job_id}")
    shot(driver, "job-phone")
    check(no_dialog(driver), "no dialog anywhere")


def main():
    work = tempfile.mkdtemp(prefix="console-browser-")
    fleet = None
    driver = None
    try:
        fleet = Fleet(work)
        driver = browser()
        run(fleet, driver, work)
    except Exception:
        traceback.print_exc()
        check(False, "the browser test ran to its end")
        if fleet:
            fleet.logs.flush()
            with open(os.path.join(work, "fleet.log"), "rb") as log:
                sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
    finally:
        if driver:
            driver.quit()
        if fleet:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
