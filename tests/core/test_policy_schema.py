"""The policy's JSON Schema (core/domain/rules/policy.schema.json) and the policy loader agree.

The schema is the policy's shape, said once, beside the loader: the Helm chart embeds it in
values.schema.json (tools/chart.py), so that `--set policy.tll=7d` stops `helm install`
instead of the pods. It must accept every policy the loader accepts and refuse what the loader
refuses for its shape: the keys it knows at each level are the loader's, and a table of policies
(the repository's own, and broken ones) is judged the same by both. What only the loader can
check (maxTTL over ttl, a kind it does not know, archiving without a store) is its alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import referencing
import yaml

from jobttl.core.domain.notices import notify as notify_module
from jobttl.core.domain.rules import policy as policy_module
from jobttl.core.domain.rules.policy import PolicyError, parse_policy
from tests.services import ROOT

DOMAIN = ROOT / "core" / "domain"
SCHEMA = json.loads((DOMAIN / "rules" / "policy.schema.json").read_text())


def validator() -> jsonschema.Draft202012Validator:
    kinds = json.loads((DOMAIN / "kinds" / "kinds.schema.json").read_text())
    registry = referencing.Registry().with_resources(
        [
            (SCHEMA["$id"], referencing.Resource.from_contents(SCHEMA)),
            (kinds["$id"], referencing.Resource.from_contents(kinds)),
        ]
    )
    return jsonschema.Draft202012Validator(SCHEMA, registry=registry)


def schema_errors(data) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(data)]


def loader_accepts(data) -> bool:
    try:
        parse_policy(data, "policy.yaml")
    except PolicyError:
        return False
    return True


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def properties(node: dict) -> set[str]:
    node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
    return set(node["properties"])


def test_the_schema_knows_the_keys_the_loader_knows_at_every_level():
    top, defs = SCHEMA["properties"], SCHEMA["$defs"]
    assert set(top) == policy_module.TOP_LEVEL_KEYS
    assert properties(defs["rule"]) == policy_module.RULE_KEYS
    top_archive = next(o for o in top["archive"]["oneOf"] if o.get("type") == "object")
    rule_archive = next(o for o in defs["rule"]["properties"]["archive"]["oneOf"] if o.get("type") == "object")
    assert set(top_archive["properties"]) == policy_module.ARCHIVE_KEYS | policy_module.ARCHIVE_STORE_KEYS
    assert set(rule_archive["properties"]) == policy_module.ARCHIVE_KEYS
    assert properties(top["namespaces"]) == {"include", "exclude"}
    assert properties(defs["keepLast"]) == {"succeeded", "failed", "groupBy"}
    assert properties(defs["selector"]) == {"matchLabels", "matchExpressions"}
    assert set(defs["selector"]["properties"]["matchExpressions"]["items"]["properties"]) == {
        "key",
        "operator",
        "values",
    }
    assert defs["selector"]["properties"]["matchExpressions"]["items"]["properties"]["operator"]["enum"] == list(
        policy_module.SELECTOR_OPERATORS
    )
    assert defs["optIn"]["enum"] == [policy_module.SKIP, policy_module.DELETE]
    assert properties(top["stuckDeletion"]) == {"fallback"}
    assert properties(defs["channel"]) - {"true"} == notify_module.CHANNEL_KEYS
    assert defs["events"]["items"]["enum"] == list(notify_module.EVENTS)


def repository_policies() -> list:
    """Every policy the repository ships or documents as one: the example, the chart's default,
    knative/'s, the test stacks' policy files."""
    found = [pytest.param(yaml.safe_load((ROOT / "examples" / "policy.yaml").read_text()), id="examples/policy.yaml")]
    chart = yaml.safe_load((ROOT / "charts" / "jobttl" / "values.yaml").read_text())["policy"]
    found.append(pytest.param(chart, id="the chart's default"))
    for path in sorted((ROOT / "knative" / "values").glob("*.yaml")):
        policy = (yaml.safe_load(path.read_text()) or {}).get("policy")
        if policy:
            found.append(pytest.param({**chart, **policy}, id=f"knative/values/{path.name}"))
    for path in sorted(Path(ROOT / "tests").rglob("*policy*.yaml")):
        found.append(pytest.param(yaml.safe_load(path.read_text()) or {}, id=str(path.relative_to(ROOT))))
    return found


@pytest.mark.parametrize("data", repository_policies())
def test_every_policy_the_repository_holds_passes_both(data):
    assert loader_accepts(data)
    assert schema_errors(data) == []


WIDGET = {
    "group": "widgets.example.com",
    "version": "v1",
    "kind": "Widget",
    "plural": "widgets",
    "finished": {"conditions": [{"type": "Done", "status": "True", "outcome": "succeeded"}]},
    "finishedAt": ["status.finishedAt"],
}


@pytest.mark.parametrize(
    "data",
    [
        {"ttl": 3600, "maxTTL": "30d", "ttlAfterSuccess": "1h30m", "ttlAfterFailure": " 2w "},
        {"dryRun": True, "keep": False, "owned": "delete", "managedBy": "skip"},
        {
            "kinds": ["TFJob", "kubeflow.org/v2beta1/MPIJob", "batch.volcano.sh/v1alpha1/Job"],
            "optIn": {"batch.volcano.sh/v1alpha1/Job": ["Aborted"]},
        },
        {"kindDeclarations": [WIDGET]},
        {"archive": {"store": "/a", "enabled": False}, "rules": [{"name": "a", "namespaces": ["x"], "archive": True}]},
        {"archive": {"store": "s3://bucket/prefix", "retention": "90d", "logKiB": 65536}},
        {"archive": {"store": "/a", "maxBytes": "50Gi"}},
        {"archive": {"store": "/a", "maxBytes": 1024}},
        {"podTTL": 0, "keepLast": {"failed": 0}, "scheduledEvents": False, "stuckDeletion": {"fallback": "Background"}},
        {
            "notify": [
                {"name": "ops", "url": "json://127.0.0.1/hook", "on": ["deleted", "stuck"], "digest": "1h"},
                {"name": "team", "urlFromEnv": "JOBTTL_NOTIFY_TEAM", "owners": True, "namespaces": ["ml"]},
            ]
        },
        {
            "archive": {"store": "/a"},
            "rules": [
                {
                    "name": "a",
                    "namespaces": ["x"],
                    "keepLast": {"succeeded": 3, "groupBy": "app"},
                    "selector": {"matchExpressions": [{"key": "k", "operator": "Exists"}]},
                    "archive": {"required": False},
                }
            ],
        },
    ],
    ids=lambda d: json.dumps(d)[:60],
)
def test_a_policy_the_loader_accepts_the_schema_accepts(data):
    assert loader_accepts(data)
    assert schema_errors(data) == []


@pytest.mark.parametrize(
    "data, where",
    [
        ({"tll": "7d"}, ""),
        ({"ttl": "7 days"}, "ttl"),
        ({"ttl": "1.5h"}, "ttl"),
        ({"ttl": True}, "ttl"),
        ({"ttl": -1}, "ttl"),
        ({"maxTTL": [1]}, "maxTTL"),
        ({"dryRun": "yes"}, "dryRun"),
        ({"keep": 1}, "keep"),
        ({"owned": True}, "owned"),
        ({"managedBy": "kueue"}, "managedBy"),
        ({"kinds": "TFJob"}, "kinds"),
        ({"kinds": [""]}, "kinds/0"),
        ({"optIn": {"Job": ["Aborted"]}}, "optIn"),
        ({"namespaces": {"exclude": "kube-system"}}, "namespaces/exclude"),
        ({"namespaces": {"only": []}}, "namespaces"),
        ({"rules": {"name": "a"}}, "rules"),
        ({"rules": [{"namespaces": ["a"]}]}, "rules/0"),
        ({"rules": [{"name": "a"}]}, "rules/0"),
        ({"rules": [{"name": "a", "namespaces": ["x"], "ownd": "delete"}]}, "rules/0"),
        ({"rules": [{"name": "a", "selector": {"matchLabels": {"gpu": True}}}]}, "rules/0/selector/matchLabels/gpu"),
        (
            {"rules": [{"name": "a", "selector": {"matchExpressions": [{"key": "k", "operator": "Has"}]}}]},
            "rules/0/selector/matchExpressions/0/operator",
        ),
        ({"rules": [{"name": "a", "namespaces": ["x"], "archive": {"store": "/a"}}]}, "rules/0/archive"),
        ({"archive": {"store": "/a", "logKiB": 0}}, "archive"),
        ({"archive": {"store": "/a", "maxBytes": "5K"}}, "archive"),
        ({"archive": "yes"}, "archive"),
        ({"keepLast": {}}, "keepLast"),
        ({"keepLast": {"succeded": 3}}, "keepLast"),
        ({"keepLast": {"failed": -1}}, "keepLast/failed"),
        ({"stuckDeletion": {"fallback": "Orphan"}}, "stuckDeletion/fallback"),
        ({"scheduledEvents": "no"}, "scheduledEvents"),
        ({"kindDeclarations": [{"kind": "Widget"}]}, "kindDeclarations/0"),
        ({"notify": [{"name": "ops", "on": ["deleted"]}]}, "notify/0"),
        ({"notify": [{"name": "ops", "url": "json://h/p", "urlFromEnv": "X", "on": ["deleted"]}]}, "notify/0"),
        ({"notify": [{"name": "ops", "url": "json://h/p", "on": ["delted"]}]}, "notify/0/on/0"),
        ({"notify": [{"name": "Ops!", "url": "json://h/p", "on": ["deleted"]}]}, "notify/0/name"),
        ({"namespaces": {"exclude": ["Production"]}}, "namespaces/exclude/0"),
        ({"namespaces": {"include": ["research "]}}, "namespaces/include/0"),
        ({"rules": [{"name": "a", "namespaces": ["prod-*"], "keep": True}]}, "rules/0/namespaces/0"),
        (
            {"notify": [{"name": "ops", "url": "json://h/p", "on": ["deleted"], "namespaces": ["Ml"]}]},
            "notify/0/namespaces/0",
        ),
        ({"notify": [{"name": "ops", "url": "slack://T/B/XXXXSECRET", "on": ["deleted"]}]}, "notify/0/url"),
        (
            {"notify": [{"name": "ops", "url": "json://h/p?+Authorization=Bearer%20S", "on": ["deleted"]}]},
            "notify/0/url",
        ),
        ({"notify": [{"name": "ops", "url": "form://h/p?a=1&-token=S", "on": ["deleted"]}]}, "notify/0/url"),
        ({"notify": [{"name": "ops", "url": "mailto://bob:pw@smtp.example", "on": ["deleted"]}]}, "notify/0/url"),
        (["ttl"], ""),
    ],
    ids=lambda v: json.dumps(v)[:60] if not isinstance(v, str) else None,
)
def test_a_policy_whose_shape_the_loader_refuses_the_schema_refuses_too(data, where):
    assert not loader_accepts(data)
    errors = schema_errors(data)
    assert errors and any(e.startswith(f"{where}:") for e in errors), errors


@pytest.mark.parametrize(
    "data",
    [
        {"ttl": "2d", "maxTTL": "1d"},
        {"kinds": ["TFJobs"]},
        {"archive": {"logKiB": 64}},
        {"rules": [{"name": "a", "namespaces": ["x"]}, {"name": "a", "namespaces": ["y"]}]},
    ],
    ids=["ttl over maxTTL", "an unknown kind", "archiving without a store", "a rule name twice"],
)
def test_what_only_the_loader_can_check_is_its_alone(data):
    """Relations between fields: the schema takes their shape, the loader refuses them at start."""
    assert schema_errors(data) == []
    assert not loader_accepts(data)
