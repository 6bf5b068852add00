"""The console's pages and actions over HTTP (Flask's test client; real Redis, the emulator reviewing
tokens and rights): each page shows what the CLI would, each action does what its command does,
only for users with the right, only with the session's CSRF token, and says who in the audit trail."""

from __future__ import annotations

import base64
import re
import time
import zlib

import pytest
from rq.job import Job
from rq.serializers import JSONSerializer

from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.runtime.config import ConfigError, Settings
from jobttl.core.store.guard import HeldDeletion, HeldDeletions
from jobttl.console import views
from jobttl.console.app import create_app
from jobttl.console.server import serve
from tests.console.conftest import GONE, LOG_TEXT

HTML = {"Accept": "text/html"}


def bearer(token: str) -> dict[str, str]:
    return {**HTML, "Authorization": f"Bearer {token}"}


@pytest.fixture
def app(settings_env, seeded):
    return create_app(Settings.from_env(settings_env))


@pytest.fixture
def client(app):
    return app.test_client()


def csrf_of(page: bytes) -> str:
    found = re.search(rb'name="csrf" value="([^"]+)"', page)
    assert found, "the page carries no CSRF token"
    return found.group(1).decode()


def signed_in(client, token: str) -> str:
    """Sign in through the page; returns the session's CSRF token."""
    form = client.get("/signin", headers=HTML)
    answer = client.post("/signin", data={"csrf": csrf_of(form.data), "token": token, "next": "/pending"})
    assert answer.status_code == 303 and answer.headers["Location"] == "/pending", answer.data
    return csrf_of(client.get("/pending", headers=HTML).data)


def text(answer) -> str:
    return answer.get_data(as_text=True)


# --- reading needs a Kubernetes identity ----------------------------------------------------------------


def test_without_an_identity_a_page_sends_the_browser_to_sign_in(client):
    answer = client.get("/pending?namespace=team-a", headers=HTML)
    assert answer.status_code == 303
    assert answer.headers["Location"].startswith("/signin?next=%2Fpending%3Fnamespace%3Dteam-a")
    assert client.get("/", headers={"Accept": "application/json"}).status_code == 401


def test_a_token_the_api_server_rejects_does_not_sign_in(client):
    form = client.get("/signin", headers=HTML)
    answer = client.post("/signin", data={"csrf": csrf_of(form.data), "token": "forged"}, headers=HTML)
    assert answer.status_code == 401 and "not accepted" in text(answer)
    assert client.get("/", headers=HTML).status_code == 303


def test_signing_in_keeps_the_token_in_redis_and_a_session_id_in_a_signed_httponly_cookie(client, app):
    form = client.get("/signin", headers=HTML)
    answer = client.post("/signin", data={"csrf": csrf_of(form.data), "token": "carol-token"})
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    payload = value.split(".")[1] if value.startswith(".") else value.split(".")[0]
    decoded = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    if value.startswith("."):  # itsdangerous compresses a long payload
        decoded = zlib.decompress(decoded)
    assert b"carol-token" not in decoded and b'"sid"' in decoded  # signed, not encrypted: never the token
    assert client.get("/", headers=HTML).status_code == 200
    csrf = csrf_of(client.get("/", headers=HTML).data)
    kept = client.get_cookie("jobttl-console").value
    client.post("/signout", data={"csrf": csrf})
    assert client.get("/", headers=HTML).status_code == 303
    # A copy of the cookie taken before the sign-out signs nobody in after it: the token is gone.
    client.set_cookie("jobttl-console", kept)
    assert client.get("/", headers=HTML).status_code == 303


def test_a_user_without_the_reader_role_is_refused_naming_it(client):
    answer = client.get("/", headers=bearer("bob-token"))
    assert answer.status_code == 403
    assert "bob may not list deletions.jobttl.io" in text(answer) and "jobttl-reader" in text(answer)


# --- pages ----------------------------------------------------------------------------------------------


def test_the_overview_shows_what_goes_when_and_the_counts(client):
    page = text(client.get("/", headers=bearer("carol-token")))
    # per hour: mnist in its 3rd hour (due in 2 h), bert beyond 24 h; per day: mnist and bert today/tomorrow
    assert "Per hour, next 24 hours (1 due" in page
    assert "Per day, next 7 days (3 due" in page
    assert re.search(r"<td>TFJob</td><td>3</td>", page)
    assert re.search(r">team-a</a></td><td>2</td>", page) and re.search(r">team-b</a></td><td>1</td>", page)
    assert "Last resync" in page and "Kinds not served" in page and "Guard" in page


def test_the_overview_shows_the_held_count_in_its_banner(client, seeded):
    hold_first(seeded)
    page = text(client.get("/", headers=bearer("carol-token")))
    assert "1 deletions held" in page or "1 held for review" in page


def test_the_pending_page_filters_sorts_and_explains(client):
    page = text(client.get("/pending", headers=bearer("carol-token")))
    jobs = re.findall(r'data-job="([^"]+)"', page)
    assert jobs == ["team-a/mnist", "team-a/bert", "team-b/gpt-small"]  # due order
    assert re.findall(
        r'data-job="([^"]+)"', text(client.get("/pending?sort=due-desc", headers=bearer("carol-token")))
    ) == list(reversed(jobs))
    assert re.findall(
        r'data-job="([^"]+)"', text(client.get("/pending?namespace=team-b", headers=bearer("carol-token")))
    ) == ["team-b/gpt-small"]
    assert re.findall(r'data-job="([^"]+)"', text(client.get("/pending?name=ber", headers=bearer("carol-token")))) == [
        "team-a/bert"
    ]
    assert "TTL 2h from" in page and "Explain" in page and 'class="countdown"' in page
    assert "Postpone" not in page  # carol reads only: no action offered


def test_the_history_page_and_a_jobs_card_with_its_archive(client):
    page = text(client.get("/history?event=deleted", headers=bearer("carol-token")))
    assert "team-a/resnet-old" in page and "training-jobs" in page
    every = client.get("/history", headers=bearer("carol-token"))
    assert every.status_code == 200 and "retry" in text(every) and "TTL 1h; 0.4 s after due" in text(every)
    card = text(client.get(f"/jobs/{GONE.namespace}/{GONE.name}", headers=bearer("carol-token")))
    assert "uid: " + GONE.uid in card  # the archived manifest
    assert "training done" in card  # the log's tail
    log = client.get(
        f"/jobs/{GONE.namespace}/{GONE.name}/archive/logs/resnet-old-worker-0/tensorflow.log",
        headers=bearer("carol-token"),
    )
    assert log.status_code == 200 and log.get_data(as_text=True) == LOG_TEXT
    assert "attachment" in log.headers["Content-Disposition"]
    other = client.get(f"/jobs/{GONE.namespace}/{GONE.name}/archive/../../../etc/passwd", headers=bearer("carol-token"))
    assert other.status_code == 404


def test_pages_load_nothing_from_elsewhere_and_forbid_framing(client):
    answer = client.get("/", headers=bearer("carol-token"))
    assert "default-src 'self'" in answer.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
    assert not re.search(r'(src|href)="(https?:)?//', text(answer))


# --- actions --------------------------------------------------------------------------------------------


def test_a_postpone_moves_the_deletion_and_says_who_in_the_audit_trail(client, seeded):
    csrf = signed_in(client, "alice-token")
    before = seeded.operations().pending("team-a")[0][0]
    answer = client.post(
        "/actions/postpone",
        data={"csrf": csrf, "namespace": "team-a", "name": "mnist", "duration": "1d", "next": "/pending"},
    )
    assert answer.status_code == 303
    after = seeded.schedule.get(before.ref.uid)
    assert after.due >= before.due + 86400
    entry = seeded.operations().history(event="postponed", limit=1)[0]
    assert (entry["name"], entry["by"]) == ("mnist", "console:alice")
    assert "Postponed team-a/mnist" in text(client.get("/pending", headers=HTML))


def test_a_keep_cancels_the_deletion_for_good_and_its_cancel_takes_it_back(client, seeded):
    csrf = signed_in(client, "alice-token")
    assert client.post("/actions/keep", data={"csrf": csrf, "namespace": "team-a", "name": "bert"}).status_code == 303
    assert [p.ref.name for p in seeded.operations().pending("team-a")[0]] == ["mnist"]
    assert seeded.operations().history(event="cancelled", limit=1)[0]["by"] == "console:alice"
    back = client.post(
        "/actions/cancel", data={"csrf": csrf, "namespace": "team-a", "name": "bert", "action": "cancel"}
    )
    assert back.status_code == 303
    assert seeded.operations().history(event="cancel-undone", limit=1)[0]["by"] == "console:alice"


def test_an_action_without_the_right_is_refused_and_changes_nothing(client, seeded):
    csrf = signed_in(client, "carol-token")
    before = seeded.operations().pending()[0]
    answer = client.post(
        "/actions/postpone", data={"csrf": csrf, "namespace": "team-a", "name": "mnist", "duration": "1d"}, headers=HTML
    )
    assert answer.status_code == 403
    assert "carol may not postpone deletions.jobttl.io in namespace team-a" in text(answer)
    assert "jobttl-console-operator" in text(answer)
    assert seeded.operations().pending()[0] == before


def test_an_action_without_the_sessions_csrf_token_is_refused(client, seeded):
    signed_in(client, "alice-token")
    before = seeded.operations().pending()[0]
    for form in ({}, {"csrf": "guessed"}):
        answer = client.post("/actions/keep", data={**form, "namespace": "team-a", "name": "mnist"}, headers=HTML)
        assert answer.status_code == 403 and "CSRF" in text(answer)
    csrf = csrf_of(client.get("/pending", headers=HTML).data)
    cross = client.post(
        "/actions/keep",
        data={"csrf": csrf, "namespace": "team-a", "name": "mnist"},
        headers={**HTML, "Origin": "https://evil.example"},
    )
    assert cross.status_code == 403
    assert seeded.operations().pending()[0] == before


def test_bad_input_is_a_clear_4xx(client):
    csrf = signed_in(client, "alice-token")
    bad = client.post(
        "/actions/postpone",
        data={"csrf": csrf, "namespace": "team-a", "name": "mnist", "duration": "soon"},
        headers=HTML,
    )
    assert bad.status_code == 400 and "duration" in text(bad)
    unknown = client.post(
        "/actions/postpone", data={"csrf": csrf, "namespace": "team-a", "name": "nope", "duration": "1h"}, headers=HTML
    )
    assert unknown.status_code == 404 and "team-a/nope" in text(unknown)
    invalid = client.post("/actions/keep", data={"csrf": csrf, "namespace": "Team A", "name": "x"}, headers=HTML)
    assert invalid.status_code == 400


def hold_first(shared) -> HeldDeletion:
    pending = shared.operations().pending("team-a")[0][0]
    held = HeldDeletion(pending.member, pending.ref, pending.as_decision(), "first-run")
    HeldDeletions(shared.redis).hold([held])
    return held


def test_the_held_page_confirms_exactly_the_set_shown(client, seeded, monkeypatch):
    monkeypatch.setattr(views, "CONFIRM_WAIT", 0)  # no worker here: the booking is what is checked
    held = hold_first(seeded)
    csrf = signed_in(client, "alice-token")
    page = text(client.get("/held", headers=HTML))
    assert f'data-job="team-a/{held.ref.name}"' in page and "first-run review" in page
    shown_id = re.search(r'name="held" value="([^"]+)"', page).group(1)
    assert shown_id == HeldDeletions(seeded.redis).current_id()
    answer = client.post("/actions/confirm", data={"csrf": csrf, "held": shown_id})
    assert answer.status_code == 303
    booked = [Job.fetch(i, connection=seeded.redis, serializer=JSONSerializer) for i in seeded.schedule.queue.job_ids]
    assert [j.kwargs for j in booked if j.id.startswith("resync-confirm-")] == [{"confirm": shown_id}]
    assert seeded.operations().history(event="review-confirm-requested", limit=1)[0]["by"] == "console:alice"


def test_a_confirmation_of_a_set_that_changed_confirms_nothing(client, seeded):
    hold_first(seeded)
    csrf = signed_in(client, "alice-token")
    answer = client.post("/actions/confirm", data={"csrf": csrf, "held": "not-the-shown-id"}, headers=HTML)
    assert answer.status_code == 409 and "changed since it was shown" in text(answer)
    assert not [i for i in seeded.schedule.queue.job_ids if i.startswith("resync-confirm-")]


def test_confirming_needs_the_confirm_verb(client, seeded):
    hold_first(seeded)
    csrf = signed_in(client, "carol-token")
    page = text(client.get("/held", headers=HTML))
    assert "confirm-held" not in page and "jobttl-console-operator" in page
    answer = client.post(
        "/actions/confirm", data={"csrf": csrf, "held": HeldDeletions(seeded.redis).current_id()}, headers=HTML
    )
    assert answer.status_code == 403 and "carol may not confirm reviews.jobttl.io" in text(answer)


# --- without sign-in: loopback only ---------------------------------------------------------------------


def test_without_sign_in_the_console_serves_loopback_only(settings_env):
    settings = Settings.from_env({**settings_env, "JOBTTL_CONSOLE_AUTH": "none"})
    with pytest.raises(ConfigError, match="JOBTTL_CONSOLE_AUTH=none .* loopback address .* not 0.0.0.0"):
        serve(settings, "0.0.0.0", 0)


def test_without_sign_in_pages_and_actions_need_no_token_and_record_the_local_operator(settings_env, seeded):
    client = create_app(Settings.from_env({**settings_env, "JOBTTL_CONSOLE_AUTH": "none"})).test_client()
    page = client.get("/pending", headers=HTML)
    assert page.status_code == 200 and "team-a/mnist" in text(page)
    answer = client.post(
        "/actions/postpone", data={"csrf": csrf_of(page.data), "namespace": "team-a", "name": "mnist", "duration": "2h"}
    )
    assert answer.status_code == 303
    assert seeded.operations().history(event="postponed", limit=1)[0]["by"] == "console:local operator (no sign-in)"


def test_dry_run_is_said_plainly_on_the_overview(settings_env, seeded, tmp_path):
    policy = tmp_path / "dry.yaml"
    policy.write_text("dryRun: true\n")
    client = create_app(Settings.from_env({**settings_env, "JOBTTL_POLICY": str(policy)})).test_client()
    page = text(client.get("/", headers=bearer("carol-token")))
    assert "Dry run: jobttl deletes nothing" in page and "dryRun: true" in page
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n- name: rehearse-research\n  namespaces: [research]\n  dryRun: true\n")
    client = create_app(Settings.from_env({**settings_env, "JOBTTL_POLICY": str(rules)})).test_client()
    page = text(client.get("/", headers=bearer("carol-token")))
    assert "Dry run: some rules delete nothing" in page and "rehearse-research" in page
    plain = text(create_app(Settings.from_env(settings_env)).test_client().get("/", headers=bearer("carol-token")))
    assert "Dry run" not in plain


def hold_unbooked(shared) -> HeldDeletion:
    """A deletion held by the first-run review as the resync holds one: not booked, no card."""
    decision = shared.operations().pending("team-a")[0][0].as_decision()
    ref = JobRef("kubeflow.org/v1", "TFJob", "team-c", "old-sweep", "7e0b0c1a-0000-4000-8000-00000000000c")
    held = HeldDeletion(ref.uid, ref, decision, "first-run")
    HeldDeletions(shared.redis).hold([held])
    return held


def test_a_held_row_is_kept_and_postponed_though_nothing_is_booked_for_it(client, seeded):
    held = hold_unbooked(seeded)
    csrf = signed_in(client, "alice-token")
    page = text(client.get("/held", headers=HTML))
    assert 'data-job="team-c/old-sweep"' in page
    kept = client.post(
        "/actions/keep", data={"csrf": csrf, "namespace": "team-c", "name": "old-sweep", "next": "/held"}
    )
    assert kept.status_code == 303
    assert seeded.schedule.override(held.ref.uid).get("keep") == "true"
    assert seeded.operations().history(event="cancelled", limit=1)[0]["by"] == "console:alice"
    later = client.post(
        "/actions/postpone",
        data={"csrf": csrf, "namespace": "team-c", "name": "old-sweep", "duration": "2d", "next": "/held"},
    )
    assert later.status_code == 303
    assert int(seeded.schedule.override(held.ref.uid)["until"]) >= time.time() + 2 * 86400 - 5


@pytest.mark.parametrize(
    "elsewhere",
    [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "evil",
        "/\t/evil.example/",
        "/\n/evil.example/",
        "/ /evil.example",
        "/x\\..\\\\evil.example",
    ],
)
def test_after_signing_in_the_browser_goes_to_a_page_of_this_console_only(client, elsewhere):
    form = client.get("/signin", headers=HTML)
    answer = client.post("/signin", data={"csrf": csrf_of(form.data), "token": "carol-token", "next": elsewhere})
    assert answer.status_code == 303 and answer.headers["Location"] == "/"


def test_behind_a_tls_ingress_the_pages_own_https_origin_acts_and_the_cookie_is_secure(settings_env, seeded):
    """Review finding: behind a TLS-terminating Ingress waitress sees http, the browser sends
    `Origin: https://...`: every form was refused, and the cookie went without Secure."""
    app = create_app(Settings.from_env({**settings_env, "JOBTTL_CONSOLE_URL": "https://jobttl.example.com/"}))
    client = app.test_client()
    form = client.get("/signin", headers=HTML)
    answer = client.post(
        "/signin",
        data={"csrf": csrf_of(form.data), "token": "carol-token", "next": "/pending"},
        headers={"Origin": "https://jobttl.example.com"},
    )
    assert answer.status_code == 303, answer.data
    assert "Secure" in answer.headers["Set-Cookie"] and "HttpOnly" in answer.headers["Set-Cookie"]
    csrf = csrf_of(client.get("/pending", headers=HTML).data)
    elsewhere = client.post("/signout", data={"csrf": csrf}, headers={"Origin": "https://evil.example"})
    assert elsewhere.status_code == 403
