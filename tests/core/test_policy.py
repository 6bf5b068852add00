"""The cluster policy and per-object annotations (worker/policy.py, worker/decision.py)."""

import textwrap

import pytest

from tests.fixtures import finished_status, job_object, tfjob, with_server_fields
from jobttl.core.domain.decisions.decision import Verdict, decide
from jobttl.core.domain.wire.durations import format_duration, parse_duration
from jobttl.core.domain.kinds.registry import (
    BATCH_JOB,
    BUILTIN_KINDS,
    TFJOB,
    TRAINJOB,
    WORKFLOW,
    bare_kind,
    kubectl_resource,
    kubectl_resource_named,
    shown_kind,
)
from jobttl.core.domain.rules.policy import PolicyError, load_policy, parse_policy

AT = 1_700_000_000
HOUR, DAY = 3600, 86400


def job(namespace="team", ttl=None, outcome="Succeeded", labels=None, annotations=None):
    obj = with_server_fields(tfjob("train", namespace, ttl=ttl))
    obj["status"] = finished_status(AT, outcome)
    if labels:
        obj["metadata"]["labels"] = labels
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


CLUSTER = parse_policy(
    {
        "ttl": "1d",
        "maxTTL": "7d",
        "ttlAfterFailure": "3d",
        "rules": [
            {"name": "pinned", "selector": {"matchLabels": {"pin": "true"}}, "keep": True},
            {"name": "research", "namespaces": ["research"], "ttl": "2d", "maxTTL": "14d"},
            {"name": "research-again", "namespaces": ["research"], "ttl": "9d"},
            {
                "name": "gpu",
                "namespaces": ["research"],
                "selector": {
                    "matchExpressions": [{"key": "accelerator", "operator": "In", "values": ["a100", "h100"]}]
                },
                "ttl": "4h",
            },
            {
                "name": "quick",
                "selector": {"matchExpressions": [{"key": "quick", "operator": "Exists"}]},
                "dryRun": True,
                "ttl": "1m",
            },
        ],
    }
)


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("36h", 36 * HOUR), ("7d", 7 * DAY), ("1h30m", 5400), ("2w", 14 * DAY), ("120", 120), (0, 0)],
)
def test_durations_in_human_units(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "1.5h", "-5s", "h", "5x", -1, True, None])
def test_bad_durations_say_what_is_expected(text):
    with pytest.raises(ValueError, match="duration|negative"):
        parse_duration(text)


def test_a_bad_duration_names_the_value_and_forms_the_parser_accepts():
    with pytest.raises(ValueError) as caught:
        parse_duration("10 minutes")
    message = str(caught.value)
    assert "got '10 minutes'" in message
    for form in ("90s", "36h", "7d", "2w", "1h30m", "3600"):
        assert form in message
        parse_duration(form)  # what the message offers is accepted


def test_format_duration_is_the_inverse():
    assert format_duration(DAY + 2 * HOUR + 3 * 60 + 4, exact=True) == "1d2h3m4s"
    assert parse_duration(format_duration(93784, exact=True)) == 93784


@pytest.mark.parametrize(
    "seconds, shown",
    [
        (7195, "1h59m"),
        (2 * DAY + 3 * HOUR + 59, "2d3h"),
        (45, "45s"),
        (90, "1m30s"),
        (3630, "1h"),
        (HOUR, "1h"),
        (0, "0s"),
        (-125, "2m5s"),
        (400 * DAY + 5, "400d"),
        (59.9, "59s"),
    ],
)
def test_durations_print_as_their_two_largest_units(seconds, shown):
    assert format_duration(seconds) == shown


def test_the_default_ttl_applies_to_jobs_that_set_none():
    decision = decide(job(), TFJOB, CLUSTER)
    assert (decision.expires_at, decision.ttl_source) == (AT + DAY, "ttl of policy")


def test_failed_jobs_get_the_failure_ttl():
    decision = decide(job(outcome="Failed"), TFJOB, CLUSTER)
    assert (decision.ttl, decision.ttl_source) == (3 * DAY, "ttlAfterFailure of policy")


def test_a_jobs_own_ttl_wins_over_the_default_but_is_capped():
    assert decide(job(ttl=HOUR), TFJOB, CLUSTER).ttl == HOUR
    capped = decide(job(ttl=30 * DAY), TFJOB, CLUSTER)
    assert capped.ttl == 7 * DAY
    assert capped.ttl_source == "spec.runPolicy.ttlSecondsAfterFinished, capped by maxTTL of policy"


def test_namespace_rules_override_global_values_and_the_first_match_wins():
    decision = decide(job(namespace="research"), TFJOB, CLUSTER)
    assert (decision.ttl, decision.ttl_source, decision.rules) == (2 * DAY, "ttl of rule research", ("research",))
    assert decide(job(namespace="research", ttl=10 * DAY), TFJOB, CLUSTER).ttl == 10 * DAY, "research's cap is 14d"


def test_selector_rules_override_namespace_rules():
    decision = decide(job(namespace="research", labels={"accelerator": "h100"}), TFJOB, CLUSTER)
    assert (decision.ttl, decision.ttl_source) == (4 * HOUR, "ttl of rule gpu")
    assert decision.rules == ("research", "gpu")
    # The gpu rule does not set ttlAfterFailure: the global one still applies to failures.
    assert (
        decide(job(namespace="research", labels={"accelerator": "h100"}, outcome="Failed"), TFJOB, CLUSTER).ttl_source
        == "ttlAfterFailure of policy"
    )


def test_a_rule_can_keep_jobs():
    decision = decide(job(labels={"pin": "true"}), TFJOB, CLUSTER)
    assert (decision.verdict, decision.reason) == (Verdict.KEPT, "rule pinned says keep")


def test_dry_run_rules_mark_the_decision():
    decision = decide(job(labels={"quick": ""}), TFJOB, CLUSTER)
    assert decision.verdict is Verdict.EXPIRES and decision.dry_run and decision.ttl == 60


def test_excluded_namespaces():
    assert decide(job(namespace="kube-system"), TFJOB, CLUSTER).verdict is Verdict.EXCLUDED
    only = parse_policy({"ttl": "1h", "namespaces": {"include": ["ml"], "exclude": []}})
    assert decide(job(namespace="team"), TFJOB, only).verdict is Verdict.EXCLUDED
    assert decide(job(namespace="ml"), TFJOB, only).verdict is Verdict.EXPIRES


CONFINED = CLUSTER.confined_to(("ml", "research"))


@pytest.mark.parametrize(
    "namespace, ttl, verdict",
    [
        pytest.param("ml", 0, Verdict.EXPIRES, id="a listed namespace: decided as ever"),
        pytest.param("research", None, Verdict.EXPIRES, id="a listed namespace under a rule"),
        pytest.param("team", 0, Verdict.EXCLUDED, id="elsewhere: kept, even with a TTL of its own"),
        pytest.param("kube-system", 0, Verdict.EXCLUDED, id="elsewhere and excluded by the policy too"),
    ],
)
def test_only_the_namespaces_jobttl_may_delete_in_are_decided(namespace, ttl, verdict):
    """JOBTTL_DELETE_NAMESPACES (the chart's rbac.namespaces): a job elsewhere is kept, saying why,
    whatever the policy or the job asks, so no DELETE goes where the RBAC would answer 403."""
    decision = decide(job(namespace=namespace, ttl=ttl), TFJOB, CONFINED)
    assert decision.verdict is verdict
    if verdict is Verdict.EXCLUDED:
        assert decision.reason == (
            f"namespace {namespace!r} is not one jobttl may delete in (JOBTTL_DELETE_NAMESPACES: ml, research)"
        )
    assert (
        decide(job(namespace=namespace, ttl=ttl), TFJOB, CLUSTER.confined_to(())).verdict
        is decide(job(namespace=namespace, ttl=ttl), TFJOB, CLUSTER).verdict
    ), "empty: every namespace, as unset"


def test_the_namespaces_jobttl_may_delete_in_come_from_the_environment(tmp_path):
    from jobttl.core.runtime.config import ConfigError, Settings

    (tmp_path / "policy.yaml").write_text("ttl: 1h\nnamespaces: {include: [ml, team]}\n")
    settings = Settings.from_env(
        {"JOBTTL_POLICY": str(tmp_path / "policy.yaml"), "JOBTTL_DELETE_NAMESPACES": "ml, a-b"}
    )
    assert settings.policy.delete_namespaces == ("ml", "a-b") == settings.delete_namespaces
    # The policy's include list and the RBAC's namespaces both hold: team is included but not deletable.
    assert decide(job(namespace="team", ttl=0), TFJOB, settings.policy).verdict is Verdict.EXCLUDED
    assert decide(job(namespace="ml", ttl=0), TFJOB, settings.policy).verdict is Verdict.EXPIRES
    with pytest.raises(ConfigError, match="JOBTTL_DELETE_NAMESPACES: 'Team_A' is not a namespace name"):
        Settings.from_env({"JOBTTL_DELETE_NAMESPACES": "ml,Team_A"})


def test_the_ttl_annotation_overrides_the_field_and_is_capped():
    decision = decide(job(ttl=HOUR, annotations={"jobttl.io/ttl": "36h"}), TFJOB, CLUSTER)
    assert (decision.ttl, decision.ttl_source) == (36 * HOUR, "annotation jobttl.io/ttl")
    assert decide(job(annotations={"jobttl.io/ttl": "90d"}), TFJOB, CLUSTER).ttl == 7 * DAY


def test_the_keep_annotation_opts_out():
    decision = decide(job(ttl=0, annotations={"jobttl.io/keep": "true"}), TFJOB, CLUSTER)
    assert decision.verdict is Verdict.KEPT and "jobttl.io/keep" in decision.reason


def test_keep_until_postpones_expiry_within_the_cap():
    until = "2023-11-16T22:13:20Z"  # AT + 2 days
    decision = decide(job(ttl=HOUR, annotations={"jobttl.io/keep-until": until}), TFJOB, CLUSTER)
    assert (decision.expires_at, decision.ttl_source) == (AT + 2 * DAY, "annotation jobttl.io/keep-until")
    far = decide(job(annotations={"jobttl.io/keep-until": "2099-01-01T00:00:00Z"}), TFJOB, CLUSTER)
    assert far.expires_at == AT + 7 * DAY and "capped by maxTTL" in far.ttl_source
    earlier = decide(job(ttl=3 * DAY, annotations={"jobttl.io/keep-until": until}), TFJOB, CLUSTER)
    assert earlier.expires_at == AT + 3 * DAY, "keep-until never shortens"


@pytest.mark.parametrize(
    "annotations, words",
    [({"jobttl.io/ttl": "soon"}, "jobttl.io/ttl"), ({"jobttl.io/keep-until": "tomorrow"}, "RFC 3339")],
)
def test_bad_annotations_are_invalid_not_errors(annotations, words):
    decision = decide(job(annotations=annotations), TFJOB, CLUSTER)
    assert decision.verdict is Verdict.INVALID_TTL and words in decision.reason


def test_trainjobs_get_policy_ttls_by_outcome():
    policy = parse_policy({"ttlAfterSuccess": "1h", "ttlAfterFailure": "1d"})
    ok = with_server_fields(job_object(TRAINJOB, "t", state="succeeded", at=AT))
    failed = with_server_fields(job_object(TRAINJOB, "t", state="failed", at=AT))
    assert decide(ok, TRAINJOB, policy).ttl == HOUR
    assert decide(failed, TRAINJOB, policy).ttl == DAY


def test_kinds_are_chosen_by_kind_or_api_version_and_kind():
    assert [k.api_version for k in parse_policy({"kinds": ["MPIJob"]}).kinds] == [
        "kubeflow.org/v1",
        "kubeflow.org/v2beta1",
    ]
    assert parse_policy({"kinds": ["argoproj.io/v1alpha1/Workflow"]}).kinds == (WORKFLOW,)


def declared(group: str, kind: str = "Widget", version: str = "v1", plural: str = "widgets") -> dict:
    return {
        "group": group,
        "version": version,
        "kind": kind,
        "plural": plural,
        "finished": {"conditions": [{"type": "Done", "status": "True", "outcome": "succeeded"}]},
        "finishedAt": ["status.finishedAt"],
    }


def test_a_bare_job_stays_batch_v1s_when_the_policy_redeclares_batch_v1_job():
    """A redeclared default kind is still the default kind: `kinds: [Job]` must not enable Volcano's Job."""
    policy = parse_policy(
        {
            "kindDeclarations": [
                {
                    **declared("batch", "Job", plural="jobs"),
                    "managedBy": {"path": "spec.managedBy", "own": ["kubernetes.io/job-controller"]},
                }
            ],
            "kinds": ["Job"],
        }
    )
    assert [(k.api_version, k.kind) for k in policy.kinds] == [("batch/v1", "Job")]


def test_a_bare_kind_names_every_non_default_kind_of_that_name():
    policy = parse_policy(
        {"kindDeclarations": [declared("a.example.com"), declared("b.example.com")], "kinds": ["Widget"]}
    )
    assert [k.api_version for k in policy.kinds] == ["a.example.com/v1", "b.example.com/v1"]
    assert bare_kind("Widget", policy.kinds) == list(policy.kinds)


@pytest.mark.parametrize("name", sorted({k.kind for k in BUILTIN_KINDS}))
def test_a_kind_is_shown_by_its_kind_alone_exactly_where_the_policy_reads_that_kind_so(name):
    """One rule: what `kinds: [Kind]` enables is what `Kind` alone shows (and --kind Kind names)."""
    enabled = parse_policy({"kinds": [name]}).kinds
    for kind in BUILTIN_KINDS:
        if kind.kind == name:
            assert (shown_kind(kind.api_version, kind.kind) == name) == (kind in enabled), kind.api_version


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=lambda k: f"{k.api_version}/{k.kind}")
def test_kubectl_is_given_one_name_for_a_kind_however_the_operator_named_it(kind):
    expected = kubectl_resource(kind.api_version, kind.kind)
    assert kubectl_resource_named(f"{kind.api_version}/{kind.kind}") == expected
    assert kubectl_resource_named(shown_kind(kind.api_version, kind.kind)) == expected
    assert kubectl_resource_named(f"{kind.kind}.{kind.group}") == expected


def test_kubectl_names_a_kind_it_does_not_build_in_with_its_group():
    """kubectl would pick one of two CRDs of Kind Widget by itself for `widget`."""
    assert kubectl_resource("a.example.com/v1", "Widget") == "widget.a.example.com"
    assert kubectl_resource_named("Widget.a.example.com") == "widget.a.example.com"
    assert kubectl_resource_named("Job.batch.volcano.sh") == "job.batch.volcano.sh"
    assert kubectl_resource_named("Job") == "job"


@pytest.mark.parametrize(
    "data, words",
    [
        ({"ttl": "forever"}, "ttl: expected a duration"),
        ({"maxTTL": "1d", "ttl": "2d"}, "ttl: is longer than maxTTL"),
        ({"dryrun": True}, "dryrun: unknown field"),
        ({"dryRun": "yes"}, "dryRun: expected true or false"),
        ({"kinds": ["TFJobs"]}, "kinds[0]: unknown kind 'TFJobs'"),
        ({"namespaces": {"exclude": "kube-system"}}, "namespaces.exclude: expected a list"),
        ({"rules": [{"namespaces": ["a"], "ttl": "1h"}]}, "rules[0].name: required"),
        ({"rules": [{"name": "x", "ttl": "1h"}]}, "rules[0]: a rule needs namespaces, a selector or both"),
        ({"rules": [{"name": "x", "selector": {"matchLabels": {"gpu": True}}}]}, "rules[0].selector.matchLabels"),
        (
            {"rules": [{"name": "x", "selector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}]},
            "rules[0].selector.matchExpressions[0].operator: must be one of",
        ),
        ({"rules": [{"name": "x", "namespaces": ["a"], "keep": "true"}]}, "rules[0].keep: expected true or false"),
        ({"rules": [{"name": "x", "namespaces": ["a"]}, {"name": "x", "namespaces": ["b"]}]}, "duplicate rule name"),
        ({"owned": True}, "owned: expected delete or skip, got True"),
        (
            {"rules": [{"name": "x", "namespaces": ["a"], "managedBy": "kueue.x-k8s.io/multikueue"}]},
            "rules[0].managedBy: expected delete or skip, got 'kueue.x-k8s.io/multikueue'",
        ),
        ({"rules": [{"name": "x", "namespaces": ["a"], "ownd": "delete"}]}, "rules[0].ownd: unknown field"),
        (["ttl"], "expected a mapping"),
    ],
)
def test_invalid_policies_are_rejected_naming_the_field(data, words):
    with pytest.raises(PolicyError) as info:
        parse_policy(data, "policy.yaml")
    assert str(info.value).startswith("policy.yaml: ")
    assert words in str(info.value)


def test_policy_files_name_themselves_in_errors(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(
        textwrap.dedent("""\
        ttl: 7d
        rules:
          - name: a
            namespaces: [x]
            maxTTL: 1d
            ttl: 2d
    """)
    )
    with pytest.raises(PolicyError, match=rf"^{path}:6: rules\[0\]\.ttl: is longer than maxTTL"):
        load_policy(path)
    path.write_text("ttl: [unclosed")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(path)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    "text, line, field, shown",
    [
        ("ttl: 99999999999999\n", 1, "ttl", "99,999,999,999,999s"),
        (
            "ttl: 1d\nrules:\n  - name: a\n    namespaces: [x]\n    ttlAfterSuccess: 40000d\n",
            5,
            r"rules\[0\]\.ttlAfterSuccess",
            "'40000d'",
        ),
        ("maxTTL: 36501d\nttlAfterFailure: 2d\n", 1, "maxTTL", "'36501d'"),
    ],
)
def test_a_policy_duration_past_the_longest_ttl_is_refused_at_load_not_blamed_on_each_job(
    tmp_path, text, line, field, shown
):
    # Loaded, it would give every job an InvalidTTL Warning telling its owner to fix what the policy wrote.
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(
        PolicyError,
        match=rf"^{path}:{line}: {field}: {shown} is longer than jobttl's longest "
        r"TTL, 3,153,600,000s \(about 100 years\)",
    ):
        load_policy(path)


def test_a_policy_duration_of_just_under_100_years_loads():
    assert parse_policy({"ttl": "36499d"}) is not None


def test_an_empty_file_is_the_default_policy(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("# nothing yet\n")
    assert load_policy(path) == parse_policy(None)


def test_the_example_policy_in_the_readme_is_valid_and_means_what_it_says():
    from tests.services import ROOT

    policy = load_policy(ROOT / "examples" / "policy.yaml")
    assert decide(job(outcome="Failed"), TFJOB, policy).ttl == 14 * DAY
    assert decide(job(namespace="sandbox"), TFJOB, policy).ttl == HOUR
    assert decide(job(labels={"accelerator": "h100"}), TFJOB, policy).dry_run
    assert decide(cron_child("team"), BATCH_JOB, policy).verdict is Verdict.OWNED
    assert decide(cron_child("batch"), BATCH_JOB, policy).ttl_source == "ttl of rule cron-children"


# --- opting in to jobs someone else owns or runs ----------------------------------------------------
# No upstream controller has such a switch: the TTL-after-finished controller deletes owned and
# managedBy Jobs alike; the training operator, mpi-operator and Trainer skip managedBy jobs always.


def cron_child(namespace="batch", labels=None):
    obj = with_server_fields(job_object(BATCH_JOB, "nightly-28391", namespace, at=AT))
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "name": "nightly",
            "uid": "5d1b2f5e-3c35-4a53-a1c1-0d8e6e0f8c2a",
            "controller": True,
        }
    ]
    obj["metadata"]["labels"] = labels or {}
    return obj


OPT_IN = parse_policy(
    {
        "ttl": "1d",
        "rules": [
            {"name": "nightly", "namespaces": ["batch"], "owned": "delete", "ttl": "2h"},
            {
                "name": "not-these",
                "namespaces": ["batch"],
                "selector": {"matchLabels": {"keep-children": "true"}},
                "owned": "skip",
            },
            {"name": "kueue", "namespaces": ["queued"], "managedBy": "delete"},
        ],
    }
)


@pytest.mark.parametrize(
    "namespace, labels, verdict, words",
    [
        pytest.param(
            "batch",
            None,
            Verdict.EXPIRES,
            "owned-by CronJob/nightly, expired as rule nightly says (owned: delete)",
            id="a namespace rule opts in",
        ),
        pytest.param(
            "batch",
            {"keep-children": "true"},
            Verdict.OWNED,
            "owned-by CronJob/nightly",
            id="a selector rule opts back out",
        ),
        pytest.param("team", None, Verdict.OWNED, "owned-by CronJob/nightly", id="elsewhere the default: skip"),
    ],
)
def test_owned_delete_opts_in_per_rule(namespace, labels, verdict, words):
    decision = decide(cron_child(namespace, labels), BATCH_JOB, OPT_IN)
    assert (decision.verdict, decision.rules[:1]) == (verdict, ("nightly",) if namespace == "batch" else ())
    assert words in decision.reason
    if verdict is Verdict.EXPIRES:
        assert (decision.ttl, decision.ttl_source) == (2 * HOUR, "ttl of rule nightly")


def test_managed_by_delete_opts_in_and_says_so():
    obj = job(namespace="queued", ttl=60)
    obj["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    decision = decide(obj, TFJOB, OPT_IN)
    assert decision.verdict is Verdict.EXPIRES and decision.ttl == 60
    assert "managed by 'kueue.x-k8s.io/multikueue', expired as rule kueue says (managedBy: delete)" in decision.reason
    elsewhere = job(namespace="team", ttl=60)
    elsewhere["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert decide(elsewhere, TFJOB, OPT_IN).verdict is Verdict.MANAGED_ELSEWHERE


def test_opting_in_globally_and_suspension_has_no_opt_in():
    everything = parse_policy({"ttl": "1h", "owned": "delete", "managedBy": "delete"})

    assert decide(cron_child("team"), BATCH_JOB, everything).verdict is Verdict.EXPIRES
    suspended = job(ttl=60)
    suspended["spec"]["runPolicy"]["suspend"] = True
    assert decide(suspended, TFJOB, everything).verdict is Verdict.SUSPENDED


def test_a_pods_stage_of_zero_seconds_is_a_pods_stage():
    """`podTTL: 0s` deletes the pods as the job finishes: the worker needs the pods RBAC for it."""
    assert parse_policy({"podTTL": "0s"}).pod_stages
    assert not parse_policy({}).pod_stages


# --- namespace names the policy writes: DNS-1123 labels, or a refusal ------------------------------


@pytest.mark.parametrize(
    "text, where, shown",
    [
        pytest.param(
            "namespaces:\n  exclude: [kube-system, Production]\n",
            "2: namespaces.exclude[1]",
            "'Production'",
            id="an exclude in capitals would match nothing",
        ),
        pytest.param(
            'namespaces:\n  include: ["research "]\n', "2: namespaces.include[0]", "'research '", id="a trailing space"
        ),
        pytest.param(
            'rules:\n  - name: keep-prod\n    namespaces: ["production "]\n    keep: true\n',
            "3: rules[0].namespaces[0]",
            "'production '",
            id="a keep rule that would keep nothing",
        ),
        pytest.param("namespaces:\n  exclude: [prod-*]\n", "2: namespaces.exclude[0]", "'prod-*'", id="no wildcards"),
        pytest.param(
            "namespaces:\n  exclude: [" + "a" * 200_000 + "]\n",
            "2: namespaces.exclude[0]",
            "'aaaa",
            id="200,000 characters",
        ),
        pytest.param(
            "notify:\n  - name: team\n    url: json://localhost\n    on: [deleted]\n    namespaces: [Team-A]\n",
            "5: notify[0].namespaces[0]",
            "'Team-A'",
            id="a notify channel's namespaces",
        ),
    ],
)
def test_a_namespace_the_api_server_could_not_have_is_refused_naming_file_line_and_field(tmp_path, text, where, shown):
    """Before: loaded, and namespace_excluded('production') said None: production's jobs expired."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{where}: {shown}"), message
    assert "is not a namespace name" in message and len(message) < 400


def test_namespaces_that_are_dns_labels_still_load():
    policy = parse_policy(
        {
            "namespaces": {"exclude": ["kube-system", "production", "team-1"], "include": []},
            "rules": [{"name": "r", "namespaces": ["a" * 63], "keep": True}],
        }
    )
    assert policy.namespace_excluded("production") == "namespace 'production' is excluded by the policy"
