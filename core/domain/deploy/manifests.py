"""The cluster manifests that follow the kinds: RBAC and event sources from the policy's kinds.

The same declarations the sink and the worker read (`Policy.kinds`, built in and declared) give
what the cluster must grant and send for them: each component's ClusterRole rules on the job
kinds (the verbs of `jobttl.core.domain.deploy.permissions.PERMISSIONS`), the ApiServerSource's `resources` and the
Trigger's kind filter. `missing` checks rendered manifests (``kubectl kustomize knative/``, ``helm
template``) against them, so a declared kind without its RBAC or its source is caught before a user
finds it. It finds each part by what it is, never by its name (a Helm release names them
``<release>-...``): the worker and the sink are the workloads whose container runs ``jobttl worker``
or ``jobttl sink``, the event source an ApiServerSource (its ``serviceAccountName``, its
``resources``) or, without Knative, the workload running ``jobttl watch``; each account's RBAC is
what the ClusterRoleBindings naming it grant. An object whose fields the check reads are not of
their type (``command: 5``, a ``volumeMounts`` item that is not a mapping) is a problem naming it,
and is not read further. Pure: manifests in, dicts out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from posixpath import normpath
from typing import Any

from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.domain.deploy.permissions import CONFIGMAPS, CRDS, CRD_GROUP, JOBS, VERSION, crd_names, permissions
from jobttl.core.domain.rules.policy import Policy

RBAC = "rbac.authorization.k8s.io/v1"
SOURCE_VERBS = ("get", "list", "watch")  # what an ApiServerSource adapter does with each resource
LABELS = {"app.kubernetes.io/part-of": "jobttl"}


def kind_rules(kinds: tuple[JobKind, ...], verbs: frozenset[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """ClusterRole rules granting `verbs` on `kinds`, one rule per API group, in first-seen order."""
    by_group: dict[str, list[str]] = defaultdict(list)
    for kind in kinds:
        if kind.plural not in by_group[kind.group]:
            by_group[kind.group].append(kind.plural)
    return [{"apiGroups": [group], "resources": plurals, "verbs": sorted(verbs)} for group, plurals in by_group.items()]


def crd_rules(kinds: tuple[JobKind, ...], verbs: frozenset[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """The rule letting the worker read its kinds' own CustomResourceDefinitions, by name; none
    when no kind has one (a rule with no names would grant every CRD)."""
    names = crd_names(kinds)
    return (
        [{"apiGroups": [CRD_GROUP], "resources": [CRDS], "resourceNames": names, "verbs": sorted(verbs)}]
        if names
        else []
    )


def cluster_roles(policy: Policy) -> list[dict[str, Any]]:
    """The source's and the worker's ClusterRoles for this policy's kinds and features."""
    worker = permissions("worker", archive=policy.archiving, pod_cleanup=policy.pod_stages)
    other = [
        {"apiGroups": [""], "resources": [resource], "verbs": sorted(verbs)}
        for resource, verbs in sorted(worker.items())
        if resource not in (JOBS, VERSION, CRDS)
    ]
    return [
        _role("jobttl-source", "source", kind_rules(policy.kinds, SOURCE_VERBS)),
        _role(
            "jobttl-worker",
            "worker",
            kind_rules(policy.kinds, worker[JOBS]) + other + crd_rules(policy.kinds, worker[CRDS]),
        ),
    ]


def _role(name: str, component: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {**LABELS, "app.kubernetes.io/component": component}},
        "rules": rules,
    }


def source_resources(policy: Policy) -> list[dict[str, str]]:
    """The ApiServerSource's `spec.resources` for this policy's kinds."""
    return [{"apiVersion": k.api_version, "kind": k.kind} for k in policy.kinds]


def trigger_kinds(policy: Policy) -> list[dict[str, Any]]:
    """The Trigger's `filters` entry that lets exactly these kinds through (by the `kind` attribute)."""
    names = list(dict.fromkeys(k.kind for k in policy.kinds))
    return [{"exact": {"kind": name}} for name in names]


# --- checking rendered manifests ------------------------------------------------------------------
# Objects whose pod template runs containers, and where that template is.
WORKLOADS = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "Pod": (),
    "Service": ("spec", "template"),
}
KNATIVE_SERVING = "serving.knative.dev/"  # a Service of this group is a Knative Service (a workload)
POLICY_ENV = "JOBTTL_POLICY"


# --- what the check reads, and of what type (a JSON Schema per kind of object) ---------------------
# Only the fields read below, only their types: anything else in an object is not this check's
# business (kubectl and the API server validate the rest). An object these refuse is not read.
def _of(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def _list(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def _at(path: tuple[str, ...], leaf: dict[str, Any]) -> dict[str, Any]:
    for key in reversed(path):
        leaf = _of(**{key: leaf})
    return leaf


_STRING = {"type": "string"}
_STRINGS = _list(_STRING)
_STRING_MAP = {"type": "object", "additionalProperties": _STRING}
_POD_SPEC = _of(
    serviceAccountName=_STRING,
    serviceAccount=_STRING,
    containers=_list(
        _of(
            command=_STRINGS,
            args=_STRINGS,
            env=_list(_of(name=_STRING, value=_STRING)),
            volumeMounts=_list(_of(name=_STRING, mountPath=_STRING, subPath=_STRING)),
        )
    ),
    volumes=_list(_of(name=_STRING, configMap=_of(name=_STRING, items=_list(_of(key=_STRING, path=_STRING))))),
)
_FILTER = _of(exact=_STRING_MAP, any=_list({"$ref": "#/$defs/filter"}), all=_list({"$ref": "#/$defs/filter"}))
_SHAPES: dict[str, dict[str, Any]] = {
    **{kind: _at((*path, "spec"), _POD_SPEC) for kind, path in WORKLOADS.items()},
    "ConfigMap": _of(data=_STRING_MAP),
    "ClusterRole": _of(
        rules=_list(_of(apiGroups=_STRINGS, resources=_STRINGS, verbs=_STRINGS, resourceNames=_STRINGS))
    ),
    "ClusterRoleBinding": _of(
        roleRef=_of(kind=_STRING, name=_STRING), subjects=_list(_of(kind=_STRING, name=_STRING, namespace=_STRING))
    ),
    "ApiServerSource": _of(
        spec=_of(serviceAccountName=_STRING, mode=_STRING, resources=_list(_of(apiVersion=_STRING, kind=_STRING)))
    ),
    "Trigger": _of(
        spec=_of(subscriber=_at(("ref", "name"), _STRING), filter=_of(attributes=_STRING_MAP), filters=_list(_FILTER))
    ),
}
_OBJECT = {
    "type": "object",
    "properties": {"apiVersion": _STRING, "kind": _STRING, "metadata": _of(name=_STRING, namespace=_STRING)},
}
_WORDS = {"object": "a mapping", "array": "a list", "string": "a string"}


@cache
def _validator(kind: str | None) -> Any:
    from jsonschema import Draft202012Validator  # a runtime dependency (kind declarations)

    return Draft202012Validator({"allOf": [_OBJECT, _SHAPES.get(kind or "", {})], "$defs": {"filter": _FILTER}})


def _named(obj: dict[str, Any], index: int) -> str:
    """An object as problems name it: ``Deployment jobttl/jobttl-worker``, or by its place in the
    manifests when its name cannot be read."""
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "object"
    meta = obj.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        namespace = meta.get("namespace")
        return f"{kind} {namespace + '/' if isinstance(namespace, str) and namespace else ''}{meta['name']}"
    return f"{kind} (object {index + 1} of the manifests, its name unreadable)"


def readable(objects: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The objects whose fields this check reads are of their types, and a problem line for each
    other one (naming it and the first field in the way). Only the first are read further."""
    kept, problems = [], []
    for index, obj in enumerate(objects):
        if not isinstance(obj, dict):
            problems.append(f"malformed: object {index + 1} of the manifests is not a mapping: not read")
            continue
        kind = obj.get("kind") if isinstance(obj.get("kind"), str) else None
        errors = sorted(_validator(kind).iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
        if not errors:
            kept.append(obj)
            continue
        error = errors[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        expected = _WORDS.get(str(error.validator_value), str(error.validator_value))
        detail = f"expected {expected}, got {error.instance!r:.60}" if error.validator == "type" else error.message
        problems.append(f"malformed: {_named(obj, index)}: {where or 'the object'}: {detail}: not read")
    return kept, problems


@dataclass(frozen=True)
class Workload:
    """An object whose container runs a jobttl command, and the service account its pods run as."""

    kind: str
    namespace: str | None
    name: str
    account: str
    container: dict[str, Any]
    pod: dict[str, Any]

    def __str__(self) -> str:
        kind = "Knative Service" if self.kind == "Service" else self.kind
        return f"{kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


def jobttl_command(container: dict[str, Any]) -> str | None:
    """The jobttl subcommand a container runs (``worker``, ``sink``, ``watch``...), or None.

    Its command and args together: ``jobttl worker``, ``python -m jobttl worker``, a shell's
    ``exec jobttl worker``; without a command the image's entrypoint runs (jobttl's image:
    ``jobttl``), so the first argument is the subcommand.
    """
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    words = [w for part in command + args for w in part.split()]
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == "jobttl":
            return next((w for w in words[i + 1 :] if not w.startswith("-")), None)
    if not command:
        return next((w for w in words if not w.startswith("-")), None)
    return None


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def workloads(objects: list[dict[str, Any]], command: str) -> list[Workload]:
    """Every workload with a container that runs ``jobttl <command>``."""
    found = []
    for obj in objects:
        kind = obj.get("kind")
        knative = str(obj.get("apiVersion", "")).startswith(KNATIVE_SERVING)
        if kind not in WORKLOADS or (kind == "Service" and not knative):
            continue  # a core Service runs nothing
        template = _get(obj, WORKLOADS[kind]) if WORKLOADS[kind] else obj
        pod = _get(template, ("spec",))
        if not isinstance(pod, dict):
            continue
        meta = obj.get("metadata") or {}
        for container in pod.get("containers") or ():
            if isinstance(container, dict) and jobttl_command(container) == command:
                account = pod.get("serviceAccountName") or pod.get("serviceAccount") or "default"
                found.append(Workload(kind, meta.get("namespace"), str(meta.get("name")), account, container, pod))
                break
    return found


def mounted_policy(objects: list[dict[str, Any]], workload: Workload) -> tuple[str | None, str]:
    """The policy a workload reads: (its YAML, where from), (None, why not) when these manifests do
    not hold it, or ("", ...) when the workload sets no JOBTTL_POLICY (the built-in defaults)."""
    env = {e.get("name"): e for e in workload.container.get("env") or () if isinstance(e, dict)}
    if POLICY_ENV not in env:
        return "", f"the built-in defaults ({workload} sets no {POLICY_ENV})"
    path = env[POLICY_ENV].get("value")
    if not isinstance(path, str) or not path.startswith("/"):
        return None, f"{workload} sets {POLICY_ENV} from elsewhere than a value"
    volumes = {v.get("name"): v for v in workload.pod.get("volumes") or () if isinstance(v, dict)}
    for mount in workload.container.get("volumeMounts") or ():
        key = _key_in_mount(mount, path)
        configmap = (volumes.get(mount.get("name")) or {}).get("configMap")
        if key is None or not isinstance(configmap, dict):
            continue
        # The first ConfigMap mount holding the path decides: found there or not, no later mount is read.
        return _configmap_file(objects, workload, configmap, _item_key(configmap, key), path)
    return None, f"{workload} reads {POLICY_ENV} {path} from no ConfigMap volume"


def _key_in_mount(mount: dict[str, Any], path: str) -> str | None:
    """The file `path` names inside the volume `mount` mounts, or None when the mount does not hold it."""
    where, file = normpath(str(mount.get("mountPath", ""))), normpath(path)
    if mount.get("subPath"):  # the mount is the file itself
        return mount["subPath"] if file == where else None
    prefix = where.rstrip("/") + "/"
    return file[len(prefix) :] if file.startswith(prefix) else None


def _item_key(configmap: dict[str, Any], file: str) -> str | None:
    """The ConfigMap key a file of its volume holds: its `items` map paths to keys; without them, the key."""
    items = {i.get("path"): i.get("key") for i in configmap.get("items") or () if isinstance(i, dict)}
    return items.get(file, file) if items else file


def _configmap_file(
    objects: list[dict[str, Any]], workload: Workload, configmap: dict[str, Any], key: str | None, path: str
) -> tuple[str | None, str]:
    """(The text of `key` in the ConfigMap the volume names, where from), or (None, why not)."""
    for obj in objects:
        meta = obj.get("metadata") or {}
        if (
            obj.get("kind") == "ConfigMap"
            and meta.get("name") == configmap.get("name")
            and (workload.namespace is None or meta.get("namespace") in (None, workload.namespace))
        ):
            text = (obj.get("data") or {}).get(key)
            if isinstance(text, str):
                return text, f"ConfigMap {configmap.get('name')}, key {key} ({workload}'s {POLICY_ENV})"
    return (
        None,
        f"{workload} reads {POLICY_ENV} {path} from ConfigMap {configmap.get('name')}, "
        "which these manifests do not hold",
    )


def missing(policy: Policy, objects: list[dict[str, Any]]) -> list[str]:
    """What rendered manifests lack for this policy's kinds: the worker's RBAC (and what the
    policy's archiving and pods stages add), an event source watching every kind with the RBAC to,
    the sink's RBAC where a source sends references, a Trigger letting every kind through. Each
    part is found by what it runs; one that cannot be found is a problem too, and so is an object
    that cannot be read (`readable`). Empty: nothing missing."""
    objects, problems = readable(objects)
    problems += _worker_missing(policy, objects)
    problems += _sources_missing(policy, objects)
    sinks = workloads(objects, "sink")
    if not sinks:
        problems.append("sink: no Deployment or Knative Service runs `jobttl sink`: no event is decided")
    problems += _triggers(policy, objects, sinks)
    return problems


def _worker_missing(policy: Policy, objects: list[dict[str, Any]]) -> list[str]:
    """A worker must run, with the RBAC its policy needs, and may get its kinds' CRDs."""
    problems = []
    workers = workloads(objects, "worker")
    if not workers:
        problems.append("worker: no Deployment (or other workload) runs `jobttl worker`: nothing deletes")
    needs = _worker_needs(policy)
    for worker in workers:
        problems += _lacking(objects, worker.namespace, worker.account, f"the worker: {worker}", needs, policy.kinds)
        problems += _crds_unreadable(objects, worker, policy.kinds)
    return problems


def _worker_needs(policy: Policy) -> list[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the worker needs: its verbs on jobs on every kind, plus what the
    policy's archiving and pods stages add on core resources."""
    needs = [(kind.group, kind.plural, verb) for kind in policy.kinds for verb in sorted(permissions("worker")[JOBS])]
    needs += [
        ("", resource, verb)
        for resource, verbs in sorted(
            permissions("worker", archive=policy.archiving, pod_cleanup=policy.pod_stages).items()
        )
        if resource not in (JOBS, VERSION, CONFIGMAPS, CRDS)
        for verb in sorted(verbs)
    ]
    return needs


def _crds_unreadable(objects: list[dict[str, Any]], worker: Workload, kinds: tuple[JobKind, ...]) -> list[str]:
    """One line when the worker may not get some of its kinds' CustomResourceDefinitions."""
    if not _bound_rules(objects, worker.namespace, worker.account):
        return []  # RBAC managed elsewhere: _lacking's one line says so
    gettable = _granted_by_name(objects, worker.namespace, worker.account, CRD_GROUP, CRDS, "get")
    unreadable = [name for name in crd_names(kinds) if not {name, "*"} & gettable]
    if not unreadable:
        return []
    return [
        f"RBAC: service account {worker.account} (the worker: {worker}) may not get the "
        f"customresourcedefinitions {', '.join(unreadable)} (the worker checks its kinds' "
        "paths against them at start; without it, a warning and no check)"
    ]


def _sources_missing(policy: Policy, objects: list[dict[str, Any]]) -> list[str]:
    """An ApiServerSource or a watcher must send every kind's events, with the RBAC to watch them
    (and the sink's to read them where a source sends references)."""
    problems = []
    sources = _api_server_sources(objects)
    watchers = workloads(objects, "watch")
    if not sources and not watchers:
        problems.append("source: no ApiServerSource and no workload runs `jobttl watch`: no event reaches the sink")
    listed = {id(s): _listed(s) for s in sources}
    unwatched = _unwatched(policy.kinds, list(listed.values()))
    for source in sources:
        problems += _source_lacking(policy, objects, source, listed[id(source)], unwatched)
    for watcher in watchers:  # it watches the kinds its policy enables
        problems += _lacking(
            objects,
            watcher.namespace,
            watcher.account,
            f"the watcher: {watcher}",
            _on(policy.kinds, permissions("watch")[JOBS]),
            policy.kinds,
        )
    if sources and not watchers:
        names = ", ".join(str((s.get("metadata") or {}).get("name")) for s in sources)
        problems += [
            f"source: ApiServerSource {names} does not watch {kind.api_version} {kind.kind}" for kind in unwatched
        ]
    return problems


def _api_server_sources(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o.get("kind") == "ApiServerSource" and str(o.get("apiVersion", "")).startswith("sources.knative.dev/")
    ]


def _unwatched(kinds: tuple[JobKind, ...], listed: list[set[tuple[Any, Any]]]) -> tuple[JobKind, ...]:
    """The kinds no source lists."""
    return tuple(k for k in kinds if not any((k.api_version, k.kind) in ls for ls in listed))


def _listed(source: dict[str, Any]) -> set[tuple[Any, Any]]:
    """The (apiVersion, kind) an ApiServerSource's resources list."""
    return {
        (r.get("apiVersion"), r.get("kind"))
        for r in (source.get("spec") or {}).get("resources") or ()
        if isinstance(r, dict)
    }


def _source_lacking(
    policy: Policy,
    objects: list[dict[str, Any]],
    source: dict[str, Any],
    listed: set[tuple[Any, Any]],
    unwatched: tuple[JobKind, ...],
) -> list[str]:
    """The RBAC one ApiServerSource lacks, and the sink's when the source sends references."""
    meta, spec = source.get("metadata") or {}, source.get("spec") or {}
    what = f"ApiServerSource {meta.get('name')}"
    # What it lists, and what no source lists yet (it will need the RBAC once it does).
    kinds = tuple(k for k in policy.kinds if (k.api_version, k.kind) in listed or k in unwatched)
    problems = _lacking(
        objects,
        meta.get("namespace"),
        spec.get("serviceAccountName") or "default",
        f"the source: {what}",
        _on(kinds, SOURCE_VERBS),
        kinds,
    )
    if spec.get("mode") == "Reference":  # the sink reads each object the event names
        for sink in workloads(objects, "sink"):
            problems += _lacking(
                objects,
                sink.namespace,
                sink.account,
                f"the sink: {sink}; {what} sends references",
                _on(kinds, permissions("sink-reference")[JOBS]),
                kinds,
            )
    return problems


def _on(kinds: tuple[JobKind, ...], verbs: Any) -> list[tuple[str, str, str]]:
    return [(kind.group, kind.plural, verb) for kind in kinds for verb in sorted(verbs)]


def _lacking(
    objects: list[dict[str, Any]],
    namespace: str | None,
    account: str,
    whose: str,
    needed: list[tuple[str, str, str]],
    kinds: tuple[JobKind, ...],
) -> list[str]:
    """One line per resource `account` may not do all of `needed` on, naming the verbs it lacks."""
    granted = _granted(objects, namespace, account)
    if not granted and needed:  # RBAC managed elsewhere, or forgotten: one line, not one per kind
        on_kinds = {(k.group, k.plural) for k in kinds}
        other: dict[str, set[str]] = defaultdict(set)
        for group, resource, verb in needed:
            if (group, resource) not in on_kinds:
                other[resource].add(verb)
        verbs = sorted({v for g, r, v in needed if (g, r) in on_kinds})
        return [
            f"RBAC: no ClusterRoleBinding in these manifests grants service account {account} ({whose}) "
            f"anything; it needs {', '.join(verbs)} on {len(kinds)} kinds"
            + "".join(f", {', '.join(sorted(v))} {r}" for r, v in other.items())
        ]
    lacking: dict[tuple[str, str], list[str]] = {}
    for group, resource, verb in needed:
        if not _allows(granted, group, resource, verb):
            lacking.setdefault((group, resource), []).append(verb)
    names = {(k.group, k.plural): f"{k.resource} ({k.api_version} {k.kind})" for k in kinds}
    return [
        f"RBAC: service account {account} ({whose}) may not {', '.join(sorted(verbs))} "
        f"{names.get((group, resource), f'{resource}.{group}' if group else resource)}"
        for (group, resource), verbs in lacking.items()
    ]


def _allows(granted: set[tuple[str, str, str]], group: str, resource: str, verb: str) -> bool:
    return any(g in (group, "*") and r in (resource, "*") and v in (verb, "*") for g, r, v in granted)


def _bound_rules(objects: list[dict[str, Any]], namespace: str | None, account: str) -> list[dict[str, Any]]:
    """The rules of the ClusterRoles bound cluster-wide to the account. Only ClusterRoleBindings
    count: jobs, their Events and pods are in every namespace."""
    roles = {
        (o.get("metadata") or {}).get("name"): o
        for o in objects
        if o.get("apiVersion") == RBAC and o.get("kind") == "ClusterRole"
    }
    rules: list[dict[str, Any]] = []
    for binding in objects:
        if (
            binding.get("apiVersion") != RBAC
            or binding.get("kind") != "ClusterRoleBinding"
            or not _binds(binding, namespace, account)
        ):
            continue
        ref = binding.get("roleRef") or {}
        role = roles.get(ref.get("name")) if ref.get("kind") == "ClusterRole" else None
        rules += [rule for rule in (role or {}).get("rules") or () if isinstance(rule, dict)]
    return rules


def _binds(binding: dict[str, Any], namespace: str | None, account: str) -> bool:
    """Whether a binding's subjects name the service account (in its namespace, when known)."""
    return any(
        isinstance(s, dict)
        and s.get("kind") == "ServiceAccount"
        and s.get("name") == account
        and (namespace is None or s.get("namespace") in (None, namespace))
        for s in binding.get("subjects") or ()
    )


def _granted(objects: list[dict[str, Any]], namespace: str | None, account: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the ClusterRoles bound cluster-wide to the account grant on
    every object of the resource (rules limited by resourceNames do not count)."""
    granted: set[tuple[str, str, str]] = set()
    for rule in _bound_rules(objects, namespace, account):
        if rule.get("resourceNames"):
            continue  # a few objects by name: not every job
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for verb in rule.get("verbs") or ():
                    granted.add((group, resource, verb))
    return granted


def _granted_by_name(
    objects: list[dict[str, Any]], namespace: str | None, account: str, group: str, resource: str, verb: str
) -> set[str]:
    """The names of `resource` the account may `verb` through ClusterRoleBindings ("*" for all)."""
    names: set[str] = set()
    for rule in _bound_rules(objects, namespace, account):
        if (
            (group in (rule.get("apiGroups") or ()) or "*" in (rule.get("apiGroups") or ()))
            and {resource, "*"} & set(rule.get("resources") or ())
            and {verb, "*"} & set(rule.get("verbs") or ())
        ):
            names.update(rule.get("resourceNames") or ["*"])  # a rule naming none grants every name
    return names


def _triggers(policy: Policy, objects: list[dict[str, Any]], sinks: list[Workload]) -> list[str]:
    """A Trigger delivering to the sink that filters on the `kind` attribute must let every kind through."""
    names = {s.name for s in sinks}
    problems = []
    for trigger in objects:
        eventing = str(trigger.get("apiVersion", "")).startswith("eventing.knative.dev/")
        if trigger.get("kind") != "Trigger" or not eventing:
            continue
        spec = trigger.get("spec") or {}
        if _get(spec, ("subscriber", "ref", "name")) not in names:
            continue
        allowed = _kind_filter(spec)
        for kind in policy.kinds:
            if allowed is not None and kind.kind not in allowed:
                problems.append(
                    f"source: Trigger {(trigger.get('metadata') or {}).get('name')} does not let "
                    f"{kind.api_version} {kind.kind} through (its kind filter)"
                )
    return problems


def _kind_filter(spec: dict[str, Any]) -> set[str] | None:
    """The Kinds a Trigger's filters let through, or None when they do not filter on `kind`."""
    allowed: set[str] | None = None
    attributes = _get(spec, ("filter", "attributes")) or {}
    if isinstance(attributes, dict) and "kind" in attributes:
        allowed = {attributes["kind"]}
    for entry in spec.get("filters") or ():
        for kinds in _filter_kinds(entry):
            allowed = kinds if allowed is None else allowed & kinds
    return allowed


def _filter_kinds(entry: Any) -> Iterator[set[str]]:
    """The sets of Kinds one `filters` entry allows, where it names the `kind` attribute."""
    if not isinstance(entry, dict):
        return
    if isinstance(entry.get("exact"), dict) and "kind" in entry["exact"]:
        yield {entry["exact"]["kind"]}
    elif isinstance(entry.get("any"), list):
        exact = [e.get("exact") for e in entry["any"] if isinstance(e, dict)]
        if exact and all(isinstance(e, dict) and set(e) == {"kind"} for e in exact) and len(exact) == len(entry["any"]):
            yield {e["kind"] for e in exact}
    elif isinstance(entry.get("all"), list):
        for inner in entry["all"]:
            yield from _filter_kinds(inner)
