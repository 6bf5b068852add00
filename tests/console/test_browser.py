"""The console in a real browser: Debian's headless Chromium driven by Selenium (chromedriver), against
a real stack (Redis, the API emulator, the sink, a worker, `jobttl console` with Kubernetes sign-in).

As an operator meets it on a first install: old finished jobs held by the first-run review, fresh
ones counting down. The pages load with them; alice (ClusterRole jobttl-console-operator) confirms
the held review from the page and `jobttl held` agrees, postpones a deletion and `jobttl pending`
shows it; carol (jobttl-reader) is refused an action. axe-core checks each page: no serious or
critical violations. Screenshots of each page go to a temporary folder, or to docs/console/ with
JOBTTL_SCREENSHOTS=docs/console (`make screenshots`).

Needs `chromium`, `chromium-driver` (`make chromium`) and axe-core (`make axe-core`); skipped, saying
so, without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from rq.job import Job
from rq.serializers import JSONSerializer

from jobttl.core.domain.deploy import rights
from jobttl.core.store import keys
from jobttl.core.store.schedule import CONFIRM_RETRIES
from jobttl.core.domain.kinds.registry import BATCH_JOB, TFJOB
from jobttl_emulator import CONFIG_MAP, EVENT, JOB as JOB_RESOURCE, POD, TFJOB as TFJOB_RESOURCE, seed_object
from tests.fixtures import job_object
from tests.services import ROOT, JobttlProcess, RedisServer, free_port, start_emulator, start_sink, wait_for

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
AXE = ROOT / ".tools" / "node_modules" / "axe-core" / "axe.min.js"
webdriver = pytest.importorskip("selenium.webdriver")
pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER), reason="chromium and chromedriver are not installed (make chromium)"
    ),
    pytest.mark.timeout(300),
]

from selenium.common.exceptions import StaleElementReferenceException, TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

MONTH = 30 * 86400
OLD = [f"resnet-sweep-{i}" for i in range(6)]  # finished a month ago: held by the first-run review
FRESH = {
    "mnist-baseline": ("ml", 2 * 3600),
    "bert-finetune": ("ml", 9 * 3600),
    "llama-eval": ("research", 26 * 3600),
    "vit-ablation": ("research", 3 * 86400),
    "gpt-small": ("ml", 5 * 86400),
    "nightly-etl": ("data", None),
}  # a batch Job: the policy's 7d
TOKENS = {
    "alice-token": {"username": "alice@example.com", "groups": ["platform-team"]},
    "carol-token": {"username": "carol@example.com", "groups": ["data-science"]},
}
GRANTS = [
    {"groups": ["platform-team"], "rules": rights.cluster_role(rights.OPERATOR)["rules"]},
    {"groups": ["data-science"], "rules": rights.cluster_role(rights.READER)["rules"]},
]
SHOTS = Path(os.environ["JOBTTL_SCREENSHOTS"]) if os.environ.get("JOBTTL_SCREENSHOTS") else None


def wait(browser, seconds: float) -> WebDriverWait:
    """A wait that reads the page afresh each turn: an element read while the page changes under it
    (a navigation, the countdown's script) is stale, a reason to look again rather than a failure."""
    return WebDriverWait(browser, seconds, ignored_exceptions=(StaleElementReferenceException,))


class Stack:
    def __init__(self, directory: Path):
        self.directory = directory
        self.emulator = start_emulator(directory, (TFJOB_RESOURCE, JOB_RESOURCE, POD, EVENT, CONFIG_MAP), gc_delay=0.1)
        self.emulator.set_identities(TOKENS, GRANTS)
        self.redis_server = RedisServer().start()
        archive = directory / "archive"
        policy = directory / "policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "kinds": ["kubeflow.org/v1/TFJob", "batch/v1/Job", "kubeflow.org/v1/PyTorchJob"],
                    "ttl": "7d",
                    "rules": [
                        {"name": "research-short", "selector": {"matchLabels": {"team": "research"}}, "maxTTL": "3d"}
                    ],
                    "archive": {"enabled": True, "store": str(archive), "required": False},
                }
            )
        )
        self.env = {
            "JOBTTL_REDIS_URL": self.redis_server.url,
            "KUBECONFIG": str(self.emulator.kubeconfig),
            "JOBTTL_QUEUE": "console",
            "JOBTTL_POLICY": str(policy),
            "JOBTTL_NAMESPACE": "jobttl",
            "JOBTTL_FIRST_RUN_REVIEW": "on",
            "JOBTTL_RESYNC_INTERVAL": "3600",
            "JOBTTL_DELETE_RATE": "0",
            "JOBTTL_WORKER_METRICS_PORT": "0",
            "JOBTTL_API_TIMEOUT": "5",
        }
        now = time.time()
        for i, name in enumerate(OLD):
            seed_object(self.emulator.store, job_object(TFJOB, name, "ml", at=now - MONTH + i))
        for name, (namespace, ttl) in FRESH.items():
            kind = BATCH_JOB if name == "nightly-etl" else TFJOB
            obj = job_object(kind, name, namespace, at=now - 60, ttl=ttl)
            obj["metadata"]["labels"] = {"team": namespace}
            seed_object(self.emulator.store, obj)
        self.processes = []
        self.sink, self.sink_url = start_sink(self.env, directory)
        self.processes.append(self.sink)
        self.processes.append(JobttlProcess(["worker"], self.env, directory, "console-worker").start())
        wait_for(
            lambda: (self.jobttl("status").get("lastResync") or {}).get("status") == "held",
            timeout=90,
            what="the first resync to hold the review",
        )
        port = free_port()
        self.console = JobttlProcess(
            ["console", "--host", "127.0.0.1", "--port", str(port)], self.env, directory, "console"
        ).start()
        self.processes.append(self.console)
        self.url = f"http://127.0.0.1:{port}"
        wait_for(lambda: requests.get(f"{self.url}/healthz", timeout=1).ok, timeout=30, what="the console")

    def jobttl(self, *args: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "jobttl", *args, "--json"],
            env={**os.environ, **self.env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.redis_server.stop()
        self.emulator.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("console-stack"))
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,800",
        "--lang=en-US",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    driver.set_window_size(1280, 800)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = SHOTS or tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def sign_in(browser, stack: Stack, token: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{stack.url}/")
    assert "/signin" in browser.current_url  # reading needs an identity
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "form.signin button[type=submit]").click()
    try:  # the page is read only if it never leaves the sign-in (read before, it may be gone by then)
        wait(browser, 60).until(lambda b: "/signin" not in b.current_url)
    except TimeoutException:
        raise AssertionError(f"still signing in: {browser.find_element(By.ID, 'main').text[:1000]}") from None


def shoot(browser, shots: Path, name: str) -> None:
    """The whole page, as tall as its content, at the window's width."""
    height = browser.execute_script("return Math.max(document.body.scrollHeight, 800)")
    width = browser.get_window_size()["width"]
    browser.set_window_size(width, min(height + 140, 4000))
    browser.save_screenshot(str(shots / f"{name}.png"))
    browser.set_window_size(width, 800)


def axe_violations(browser) -> list[dict]:
    """axe-core's serious and critical violations on the page (WCAG 2.x A and AA rules and best practice)."""
    if not AXE.exists():
        pytest.skip(f"axe-core is not installed ({AXE}): make axe-core")
    browser.execute_script(AXE.read_text())
    browser.set_script_timeout(60)
    violations = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations), e => done([{id: 'axe-error', "
        "impact: 'critical', description: String(e), nodes: []}]));"
    )
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "help": v.get("help") or v.get("description"),
            "where": [n.get("target") for n in v.get("nodes", [])][:5],
        }
        for v in violations
        if v.get("impact") in ("serious", "critical")
    ]


PAGES = {"overview": "/", "pending": "/pending", "held": "/held", "history": "/history"}


def test_the_pages_load_with_the_seeded_jobs_and_pass_axe(stack, browser, shots):
    sign_in(browser, stack, "alice-token")
    problems = {}
    for name, path in PAGES.items():
        browser.get(f"{stack.url}{path}")
        assert browser.find_element(By.TAG_NAME, "h1").text
        problems[name] = axe_violations(browser)
        shoot(browser, shots, name)
        if name == "overview":
            assert browser.find_elements(By.CSS_SELECTOR, "svg.bars rect.bar")
            assert (
                "First-run review open" in browser.page_source and f"{len(OLD)} held for review" in browser.page_source
            )
        if name == "pending":
            rows = [r.get_attribute("data-job") for r in browser.find_elements(By.CSS_SELECTOR, "#pending tbody tr")]
            assert rows[:2] == ["ml/mnist-baseline", "ml/bert-finetune"], rows  # due order
            assert {f"{ns}/{n}" for n, (ns, _) in FRESH.items()} <= set(rows)
            countdown = browser.find_element(By.CSS_SELECTOR, "#pending .countdown")
            first = countdown.text
            wait(browser, 30).until(
                lambda b: b.find_element(By.CSS_SELECTOR, "#pending .countdown").text != first
            )  # ticks
        if name == "held":
            rows = {r.get_attribute("data-job") for r in browser.find_elements(By.CSS_SELECTOR, "#held tbody tr")}
            assert rows == {f"ml/{n}" for n in OLD}
    # The pending page on a phone.
    browser.set_window_size(390, 844)
    browser.get(f"{stack.url}/pending")
    problems["pending (phone)"] = axe_violations(browser)
    browser.save_screenshot(str(shots / "pending-phone.png"))
    browser.set_window_size(1280, 800)
    assert not any(problems.values()), json.dumps(problems, indent=1)


def test_a_postpone_from_the_page_shows_in_jobttl_pending(stack, browser):
    sign_in(browser, stack, "alice-token")
    before = {p["name"]: p["due"] for p in stack.jobttl("pending")["items"]}
    browser.get(f"{stack.url}/pending?namespace=ml")
    row = browser.find_element(By.CSS_SELECTOR, '#pending tr[data-job="ml/mnist-baseline"]')
    field = row.find_element(By.NAME, "duration")
    field.clear()
    field.send_keys("3d")
    row.find_element(By.XPATH, ".//button[normalize-space()='Postpone']").click()
    wait(browser, 60).until(lambda b: "Postponed ml/mnist-baseline" in b.page_source)
    after = {p["name"]: p["due"] for p in stack.jobttl("pending")["items"]}
    assert after["mnist-baseline"] >= before["mnist-baseline"] + 3 * 86400
    entry = stack.jobttl("history", "ml/mnist-baseline", "--event", "postponed")["items"][0]
    assert entry["by"] == "console:alice@example.com"


def release_after_a_try(redis, lock) -> None:
    """Release the resync lock once the confirmation's resync has found it taken (and is booked again)."""

    def tried() -> bool:
        jobs = [
            Job.fetch(key.decode().removeprefix("rq:job:"), connection=redis, serializer=JSONSerializer)
            for key in redis.scan_iter("rq:job:resync-confirm-*")
            if ":" not in key.decode()[len("rq:job:") :]
        ]
        return any(job.retries_left is not None and job.retries_left < CONFIRM_RETRIES for job in jobs)

    try:
        wait_for(tried, timeout=30, what="the confirmation to find the resync lock taken")
    finally:
        lock.release()


def test_a_held_review_confirmed_from_the_page_is_released_and_jobttl_held_agrees(stack, browser, shots):
    sign_in(browser, stack, "alice-token")
    held = stack.jobttl("held")
    assert len(held["items"]) == len(OLD)
    browser.get(f"{stack.url}/held")
    # One of them the operator keeps from its row: confirming the rest must not delete it.
    kept = OLD[-1]
    browser.find_element(By.CSS_SELECTOR, f'#held tr[data-job="ml/{kept}"]').find_element(
        By.XPATH, ".//button[normalize-space()='Keep']"
    ).click()
    wait(browser, 60).until(
        lambda b: f"Kept ml/{kept}" in b.page_source,
        message=browser.current_url + browser.find_element(By.ID, "main").text[:2000],
    )
    # A periodic resync is running as the operator confirms: the confirmation waits for it, not lost.
    redis = stack.redis_server.client()
    lock = redis.lock(keys.RESYNC_LOCK, timeout=120, thread_local=False)  # released by another thread
    assert lock.acquire(blocking=False)
    released = threading.Thread(target=release_after_a_try, args=(redis, lock), daemon=True)
    released.start()
    browser.find_element(By.ID, "confirm-held").click()
    wait(browser, 30).until(expected_conditions.alert_is_present()).accept()
    wait(browser, 60).until(lambda b: f"Confirmed {held['heldId']}" in b.page_source)
    released.join(timeout=5)
    assert stack.jobttl("held")["items"] == []
    deleted = lambda: {r["path"].rsplit("/", 1)[1] for r in stack.emulator.requests("DELETE")}  # noqa: E731
    wait_for(lambda: set(OLD[:-1]) <= deleted(), timeout=60, what="the confirmed deletions")
    assert kept not in deleted()
    assert stack.emulator.store.get(TFJOB_RESOURCE, "ml", kept) is not None
    assert not stack.jobttl("status")["install"]["underReview"]
    # What went, and a job's card with its archived manifest.
    wait_for(lambda: stack.jobttl("history", "--event", "deleted")["items"], timeout=30, what="the deletions' records")
    browser.get(f"{stack.url}/history")
    assert "resnet-sweep-0" in browser.page_source, browser.find_element(By.ID, "main").text[:3000]
    shoot(browser, shots, "history")
    browser.get(f"{stack.url}/jobs/ml/resnet-sweep-0")
    assert "kind: TFJob" in browser.page_source and "Download manifest.yaml" in browser.page_source
    assert not axe_violations(browser)
    shoot(browser, shots, "job")


def test_an_action_without_the_right_is_refused(stack, browser):
    sign_in(browser, stack, "carol-token")
    browser.get(f"{stack.url}/pending")
    assert browser.find_elements(By.CSS_SELECTOR, "#pending tbody tr")  # carol reads
    assert not browser.find_elements(By.XPATH, "//button[normalize-space()='Postpone']")  # and is offered nothing
    before = {p["name"]: p["due"] for p in stack.jobttl("pending")["items"]}
    # The form she is not offered, sent from the page itself (her session's CSRF token): the server refuses.
    browser.execute_script("""
        const f = document.createElement('form'); f.method = 'post'; f.action = '/actions/postpone';
        const add = (n, v) => { const i = document.createElement('input'); i.type = 'hidden'; i.name = n; i.value = v; f.appendChild(i); };
        add('csrf', document.querySelector('input[name=csrf]').value);
        add('namespace', 'ml'); add('name', 'gpt-small'); add('duration', '30d');
        document.body.appendChild(f); f.submit();""")
    wait(browser, 60).until(lambda b: "403" in b.find_element(By.TAG_NAME, "h1").text)
    assert "carol@example.com may not postpone deletions.jobttl.io in namespace ml" in browser.page_source
    assert "jobttl-console-operator" in browser.page_source
    assert {p["name"]: p["due"] for p in stack.jobttl("pending")["items"]}["gpt-small"] == before["gpt-small"]
