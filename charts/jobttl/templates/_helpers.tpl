{{/* Names ------------------------------------------------------------------------------- */}}

{{- define "jobttl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object's name: "jobttl" for a release named jobttl, as in knative/base. */}}
{{- define "jobttl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "jobttl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The service account of a component: (dict "ctx" $ "component" "worker"). */}}
{{- define "jobttl.serviceAccountName" -}}
{{- printf "%s-%s" (default (include "jobttl.fullname" .ctx) .ctx.Values.serviceAccount.name) .component }}
{{- end }}

{{/* Labels ------------------------------------------------------------------------------ */}}

{{/* Selector labels: (dict "ctx" $ "component" "sink"). part-of and component are the
     labels knative/base selects by; the instance keeps two releases apart. */}}
{{- define "jobttl.selectorLabels" -}}
app.kubernetes.io/part-of: jobttl
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{/* Every object's labels: Helm's, the selector's, then commonLabels (which cannot replace those). */}}
{{- define "jobttl.labels" -}}
{{- $own := fromYaml (include "jobttl.ownLabels" .) }}
{{- include "jobttl.ownLabels" . }}
{{- range $key, $value := .ctx.Values.commonLabels }}
{{- if not (hasKey $own $key) }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "jobttl.ownLabels" -}}
helm.sh/chart: {{ include "jobttl.chart" .ctx }}
app.kubernetes.io/name: {{ include "jobttl.name" .ctx }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{ include "jobttl.selectorLabels" . }}
{{- end }}

{{/* Pod template labels: the selector's, then podLabels and the component's own podLabels
     (dict "ctx" $ "component" "sink" "values" .Values.sink); the selector's always win. */}}
{{- define "jobttl.podLabels" -}}
{{- $selector := fromYaml (include "jobttl.selectorLabels" .) }}
{{- include "jobttl.selectorLabels" . }}
{{- range $key, $value := merge (default dict (default dict .values).podLabels) (default dict .ctx.Values.podLabels) }}
{{- if not (hasKey $selector $key) }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod template annotations: `extra` (the chart's own, e.g. checksum/policy), then the
     component's podAnnotations, then podAnnotations: (dict "ctx" $ "values" .Values.sink "extra" (dict ...)).
     Nothing when there are none. */}}
{{- define "jobttl.podAnnotations" -}}
{{- $annotations := merge (default dict .extra) (default dict (default dict .values).podAnnotations) (default dict .ctx.Values.podAnnotations) }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Images ------------------------------------------------------------------------------ */}}

{{/* registry/repository[:tag][@digest] of an image value, global.imageRegistry in place of its
     registry: (dict "ctx" $ "image" .Values.image "default" tag). No tag and no default: by digest alone. */}}
{{- define "jobttl.imageRef" -}}
{{- $registry := default .image.registry ((.ctx.Values.global).imageRegistry) }}
{{- $ref := .image.repository }}
{{- if $registry }}{{ $ref = printf "%s/%s" $registry .image.repository }}{{ end }}
{{- $tag := toString (default "" (default .default .image.tag)) }}
{{- if $tag }}{{ $ref = printf "%s:%s" $ref $tag }}{{ end }}
{{- if .image.digest }}{{ $ref = printf "%s@%s" $ref .image.digest }}{{ end }}
{{- $ref }}
{{- end }}

{{- define "jobttl.image" -}}
{{- include "jobttl.imageRef" (dict "ctx" . "image" .Values.image "default" .Chart.AppVersion) }}
{{- end }}

{{/* The scheduling part of a pod spec: pull secrets, then each of priorityClassName, nodeSelector,
     tolerations, affinity and topologySpreadConstraints from the component's values when set,
     else the top level's. A spread constraint without a labelSelector gets the component's pods'.
     (dict "ctx" $ "component" "sink" "values" .Values.sink) */}}
{{- define "jobttl.podScheduling" -}}
{{- $top := .ctx.Values }}
{{- $own := default dict .values }}
{{- with concat (default list ($top.global).imagePullSecrets) (default list $top.imagePullSecrets) }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with default $top.priorityClassName $own.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- range $field := list "nodeSelector" "tolerations" "affinity" }}
{{- with default (get $top $field) (get $own $field) }}
{{ $field }}:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- with default $top.topologySpreadConstraints $own.topologySpreadConstraints }}
{{- $constraints := list }}
{{- range . }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" (fromYaml (include "jobttl.selectorLabels" $))) }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- end }}

{{/* Knative Services take no pod-level securityContext by default: the pod's fields go into
     the container's (they mean the same there). */}}
{{- define "jobttl.knativeContainerSecurityContext" -}}
{{- $pod := pick .Values.podSecurityContext "runAsNonRoot" "runAsUser" "runAsGroup" "seccompProfile" }}
{{- toYaml (merge (deepCopy .Values.securityContext) $pod) }}
{{- end }}

{{/* The policy ---------------------------------------------------------------------------- */}}

{{/* "apiVersion/Kind" of every configured kind, for the policy's `kinds:`. */}}
{{- define "jobttl.policy" -}}
{{- $kinds := list }}
{{- range .Values.kinds }}{{ $kinds = append $kinds (printf "%s/%s" .apiVersion .kind) }}{{ end }}
{{- toYaml (merge (dict "kinds" $kinds) (deepCopy .Values.policy)) }}
{{- end }}

{{/* "true" when the policy archives some job (a store and an archive enabled at some level):
     the worker then reads pods, their logs and Events (jobttl.core.domain.deploy.permissions ARCHIVE_PERMISSIONS). */}}
{{- define "jobttl.archiving" -}}
{{- $policy := .Values.policy }}
{{- $store := and (kindIs "map" $policy.archive) (hasKey $policy.archive "store") }}
{{- $on := false }}
{{- range prepend (default list $policy.rules) $policy }}
{{- if hasKey . "archive" }}
{{- if kindIs "map" .archive }}
{{- if or (not (hasKey .archive "enabled")) .archive.enabled }}{{ $on = true }}{{ end }}
{{- else if .archive }}{{ $on = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $store $on }}true{{ end }}
{{- end }}

{{/* "true" when some job's pods go before it (podTTL*): the worker lists and deletes pods
     (jobttl.core.domain.deploy.permissions POD_CLEANUP_PERMISSIONS). */}}
{{- define "jobttl.podStages" -}}
{{- $on := false }}
{{- range prepend (default list .Values.policy.rules) .Values.policy }}
{{- if or (hasKey . "podTTL") (hasKey . "podTTLAfterSuccess") (hasKey . "podTTLAfterFailure") }}{{ $on = true }}{{ end }}
{{- end }}
{{- if $on }}true{{ end }}
{{- end }}

{{/* RBAC rules on the configured kinds, one per API group: (dict "kinds" ... "verbs" (list ...)). */}}
{{- define "jobttl.kindRules" -}}
{{- $groups := list }}
{{- $plurals := dict }}
{{- range .kinds }}
{{- $group := "" }}
{{- if contains "/" .apiVersion }}{{ $group = regexReplaceAll "/[^/]*$" .apiVersion "" }}{{ end }}
{{- if not (hasKey $plurals $group) }}
{{- $groups = append $groups $group }}
{{- $_ := set $plurals $group list }}
{{- end }}
{{- if not (has .plural (get $plurals $group)) }}
{{- $_ := set $plurals $group (append (get $plurals $group) .plural) }}
{{- end }}
{{- end }}
{{- range $groups }}
- apiGroups: [{{ . | quote }}]
  resources: {{ get $plurals . | toJson }}
  verbs: {{ $.verbs | toJson }}
{{- end }}
{{- end }}

{{/* Redis --------------------------------------------------------------------------------- */}}

{{- define "jobttl.redis.secretName" -}}
{{- default (printf "%s-redis" (include "jobttl.fullname" .)) .Values.redis.auth.existingSecret }}
{{- end }}

{{/* The environment that connects a process to Redis. */}}
{{- define "jobttl.redis.env" -}}
{{- $redis := .Values.redis }}
{{- if eq $redis.mode "external" }}
- name: JOBTTL_REDIS_URL
  valueFrom:
    secretKeyRef: {name: {{ $redis.external.existingSecret }}, key: {{ $redis.external.existingSecretKey }}}
{{- else }}
{{- if or (eq $redis.mode "bundled") $redis.auth.existingSecret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "jobttl.redis.secretName" . }}, key: {{ $redis.auth.existingSecretKey }}}
{{- end }}
- name: JOBTTL_REDIS_URL
{{- if eq $redis.mode "bundled" }}
  value: redis://:$(REDIS_PASSWORD)@{{ include "jobttl.fullname" . }}-redis:6379/0
{{- else }}
{{- $auth := ternary ":$(REDIS_PASSWORD)@" "" (not (empty $redis.auth.existingSecret)) }}
{{- $query := ternary "?sentinel_password=$(REDIS_PASSWORD)" "" (and $redis.sentinel.sentinelPassword (not (empty $redis.auth.existingSecret))) }}
  value: {{ printf "%s://%s%s/%s/%v%s" (ternary "rediss+sentinel" "redis+sentinel" $redis.sentinel.tls) $auth (join "," $redis.sentinel.hosts) $redis.sentinel.masterSet $redis.sentinel.db $query | quote }}
{{- end }}
{{- end }}
{{- if or $redis.tls.caSecret $redis.tls.caConfigMap }}
- name: JOBTTL_REDIS_CA_FILE
  value: /etc/jobttl-redis-ca/{{ $redis.tls.caKey }}
{{- end }}
{{- end }}

{{/* Mounts and volumes for the policy, /tmp and Redis's CA. */}}
{{- define "jobttl.volumeMounts" -}}
- name: policy
  mountPath: /etc/jobttl
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if or .Values.redis.tls.caSecret .Values.redis.tls.caConfigMap }}
# Beside the policy's mount, not inside it: a mount point cannot be made in a read-only volume.
- name: redis-ca
  mountPath: /etc/jobttl-redis-ca
  readOnly: true
{{- end }}
{{- end }}

{{/* (dict "ctx" $ "tmpSize" "64Mi") */}}
{{- define "jobttl.volumes" -}}
- name: policy
  configMap:
    name: {{ include "jobttl.fullname" .ctx }}-policy
- name: tmp
  emptyDir: {sizeLimit: {{ .tmpSize }}}
{{- with .ctx.Values.redis.tls }}
{{- if .caSecret }}
- name: redis-ca
  secret:
    secretName: {{ .caSecret }}
    items: [{key: {{ .caKey }}, path: {{ .caKey }}}]
{{- else if .caConfigMap }}
- name: redis-ca
  configMap:
    name: {{ .caConfigMap }}
    items: [{key: {{ .caKey }}, path: {{ .caKey }}}]
{{- end }}
{{- end }}
{{- end }}

{{/* The environment of the sink and the worker besides Redis's. */}}
{{- define "jobttl.commonEnv" -}}
- name: JOBTTL_POLICY
  value: /etc/jobttl/policy.yaml
- name: JOBTTL_FIRST_RUN_REVIEW
  value: {{ ternary "on" "off" .Values.firstRunReview | quote }}
{{- with .Values.rbac.namespaces }}
# The namespaces the worker's RBAC lets it delete in: jobs elsewhere are kept, with that said.
- name: JOBTTL_DELETE_NAMESPACES
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}

{{/* The log level, `env` (the sink's and the worker's), then extraEnv and the component's own:
     (dict "ctx" $ "values" .Values.sink "env" true). Last in the container's list: the schema
     refuses names the chart sets itself. */}}
{{- define "jobttl.extraEnv" -}}
- name: JOBTTL_LOG_LEVEL
  value: {{ .ctx.Values.logLevel }}
{{- if .env }}
{{- range $name, $value := .ctx.Values.env }}
- name: {{ $name }}
  value: {{ toString $value | quote }}
{{- end }}
{{- end }}
{{- with concat (default list .ctx.Values.extraEnv) (default list (default dict .values).extraEnv) }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A container's envFrom (extraEnv's, then the component's): (dict "ctx" $ "values" .Values.sink).
     A variable the container's `env` sets wins over these (Kubernetes' rule). */}}
{{- define "jobttl.envFrom" -}}
{{- with concat (default list .ctx.Values.envFrom) (default list (default dict .values).envFrom) }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The worker's probe: the same check as the worker's healthcheck in docker-compose.yml. */}}
{{- define "jobttl.workerProbe" -}}
# Alive = this pod's RQ worker is registered in Redis. RQ refreshes the registration (a key
# that expires after worker_ttl + 60 s) at least every worker_ttl - 15 s, so a hung or dead
# worker drops out. A Redis outage passes: restarting the worker cannot fix Redis.
import os, socket, sys
from redis.exceptions import RedisError
from rq import Worker
from jobttl.core.store import redisconn  # the same connection as the worker's: Sentinel, TLS and its CA
try:
    redis = redisconn.client(os.environ["JOBTTL_REDIS_URL"], redisconn.PROBE, os.environ.get("JOBTTL_REDIS_CA_FILE"))
    workers = Worker.all(connection=redis)
except RedisError as exc:
    print(f"Redis unreachable, not the worker's fault: {exc}")
    sys.exit(0)
host = socket.gethostname()
sys.exit(0 if any(w.hostname == host for w in workers) else f"no RQ worker registered for {host}")
{{- end }}

{{/* The bundled Redis's password Job (redis-init.yaml): the Secret, created once, then left alone. */}}
{{- define "jobttl.redisPasswordInit" -}}
# Creates the Secret with a random password if it is not there; never changes one that is.
import os, secrets, sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException
name, key, namespace = os.environ["SECRET_NAME"], os.environ["SECRET_KEY"], os.environ["SECRET_NAMESPACE"]
KEEP = "helm.sh/resource-policy"
try:
    config.load_incluster_config()
except config.ConfigException:
    config.load_kube_config()  # outside a pod: KUBECONFIG (the chart's tests run it so)
api = client.CoreV1Api()

def read():
    try:
        return api.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise

secret = read()
if secret is None:
    # 64 hex digits: URL-safe, as the password goes into JOBTTL_REDIS_URL as it is.
    body = client.V1Secret(api_version="v1", kind="Secret", type="Opaque", string_data={key: secrets.token_hex(32)},
                           metadata=client.V1ObjectMeta(name=name, annotations={KEEP: "keep"},
                                                        labels={"app.kubernetes.io/part-of": "jobttl"}))
    try:
        api.create_namespaced_secret(namespace, body)
        print(f"created Secret {namespace}/{name} with a random password under {key!r}")
        sys.exit(0)
    except ApiException as exc:
        if exc.status != 409:
            raise
    secret = read()  # another run created it meanwhile: keep that one
if key not in (secret.data or {}):
    sys.exit(f"Secret {namespace}/{name} has no key {key!r}, which Redis and jobttl's pods read: "
             "add it, or set redis.auth.existingSecretKey to the key it has")
if (secret.metadata.annotations or {}).get(KEEP) != "keep":
    # Rendered by an earlier chart (0.2) as one of the release's objects: the upgrade that no
    # longer renders it would delete it, and Redis would lose its password. Helm keeps it now.
    api.patch_namespaced_secret(name, namespace, {"metadata": {"annotations": {KEEP: "keep"}}})
    print(f"Secret {namespace}/{name}: annotated {KEEP}=keep, so that this upgrade leaves it")
print(f"Secret {namespace}/{name} is there: its password stays")
{{- end }}

{{/* NetworkPolicy ------------------------------------------------------------------------ */}}

{{- define "jobttl.policyTypes" -}}
{{- ternary "[Ingress, Egress]" "[Ingress]" .Values.networkPolicy.egress.enabled }}
{{- end }}

{{/* Egress rules: DNS, then what (dict "ctx" $ "to" (list ...)) names: "redis" (the bundled one's
     pod, else networkPolicy.egress.redis), "apiServer", "sink" (its pods' port), "extra". */}}
{{- define "jobttl.egress" -}}
{{- $egress := .ctx.Values.networkPolicy.egress }}
- to:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: {{ $egress.dns.namespace }}}}
      podSelector:
        matchLabels:
          {{- toYaml $egress.dns.podLabels | nindent 10 }}
  ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
{{- if has "redis" .to }}
{{- if eq .ctx.Values.redis.mode "bundled" }}
- to:
    - podSelector:
        matchLabels:
          {{- include "jobttl.selectorLabels" (dict "ctx" .ctx "component" "redis") | nindent 10 }}
  ports:
    - {protocol: TCP, port: 6379}
{{- else }}
{{- include "jobttl.cidrRules" $egress.redis }}
{{- end }}
{{- end }}
{{- if has "apiServer" .to }}
{{- include "jobttl.cidrRules" $egress.apiServer }}
{{- end }}
{{- if has "sink" .to }}
- to:
    - podSelector:
        matchLabels:
          {{- include "jobttl.selectorLabels" (dict "ctx" .ctx "component" "sink") | nindent 10 }}
  ports:
    - {protocol: TCP, port: 8080}
{{- end }}
{{- if has "extra" .to }}
{{- with $egress.extra }}
{{ toYaml . }}
{{- end }}
{{- end }}
{{- end }}

{{/* [{cidr, ports}] as egress rules to those addresses on those TCP ports. */}}
{{- define "jobttl.cidrRules" -}}
{{- range . }}
- to:
    - ipBlock: {cidr: {{ .cidr | quote }}}
  ports:
    {{- range .ports }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
{{- end }}
{{- end }}

{{/* What the schema cannot say: one version per kind and group (no cluster serves two MPIJob
     versions at once, and the RBAC would not tell them apart); an egress policy that would cut
     the processes off their own Redis. */}}
{{- define "jobttl.validate" -}}
{{- $seen := dict }}
{{- range .Values.kinds }}
{{- $key := printf "%s %s" (regexReplaceAll "/[^/]*$" .apiVersion "") .kind }}
{{- if hasKey $seen $key }}
{{- fail (printf "kinds: %s is listed twice (%s and %s); a cluster serves one version of a kind: keep the one it serves" .kind (get $seen $key) .apiVersion) }}
{{- end }}
{{- $_ := set $seen $key .apiVersion }}
{{- end }}
{{- $egress := .Values.networkPolicy.egress }}
{{- if and .Values.networkPolicy.enabled $egress.enabled (ne .Values.redis.mode "bundled") (empty $egress.redis) }}
{{- fail (printf "networkPolicy.egress.redis: with egress policies on and redis.mode %s, list where the Redis is ([{cidr: 10.0.0.0/8, ports: [6379, 26379]}]): else the sink and the worker could not reach it" .Values.redis.mode) }}
{{- end }}
{{- end }}

{{- /* A Kubernetes memory quantity (512Mi, 1Gi, 400M, 536870912) in bytes; fails naming `field`
otherwise. Called as (dict "quantity" q "field" "redis.bundled.maxmemory"). */}}
{{- define "jobttl.memoryBytes" -}}
{{- $q := toString .quantity }}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 }}
{{- $parts := regexFindAll "^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$" $q 1 }}
{{- if not $parts }}
{{- fail (printf "%s: %q is not a memory quantity jobttl reads (a whole number with Ki, Mi, Gi, Ti, k, M, G or T, e.g. 384Mi)" .field $q) }}
{{- end }}
{{- $number := regexFind "^[0-9]+" $q }}
{{- $unit := trimPrefix $number $q }}
{{- mul (int64 $number) (get $units $unit) }}
{{- end }}

{{- /* The bundled Redis's maxmemory in bytes: redis.bundled.maxmemory, or three quarters of its
memory limit (384Mi of 512Mi), so that Redis refuses writes (noeviction) before the kernel kills
the pod: the rest of the limit is Redis's own overhead (AOF rewrite buffers, client buffers,
fragmentation). A maxmemory at or above the limit, or none and no limit, fails the render. */}}
{{- define "jobttl.redis.maxmemory" -}}
{{- $bundled := .Values.redis.bundled }}
{{- $limits := (($bundled.resources | default dict).limits | default dict) }}
{{- $limit := 0 }}
{{- if $limits.memory }}
{{- $limit = include "jobttl.memoryBytes" (dict "quantity" $limits.memory "field" "redis.bundled.resources.limits.memory") | int64 }}
{{- end }}
{{- if $bundled.maxmemory }}
{{- $max := include "jobttl.memoryBytes" (dict "quantity" $bundled.maxmemory "field" "redis.bundled.maxmemory") | int64 }}
{{- if and $limit (ge $max $limit) }}
{{- fail (printf "redis.bundled.maxmemory: %s is not below Redis's memory limit (redis.bundled.resources.limits.memory %s): the pod would be killed before Redis refuses a write; leave room for Redis's overhead (e.g. three quarters of the limit)" (toString $bundled.maxmemory) (toString $limits.memory)) }}
{{- end }}
{{- $max }}
{{- else if $limit }}
{{- div (mul $limit 3) 4 }}
{{- else }}
{{- fail "redis.bundled.maxmemory: set it, or redis.bundled.resources.limits.memory (maxmemory is then three quarters of it): without either the bundled Redis grows until its node runs out of memory" }}
{{- end }}
{{- end }}
