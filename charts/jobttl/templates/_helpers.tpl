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

{{- define "jobttl.labels" -}}
helm.sh/chart: {{ include "jobttl.chart" .ctx }}
app.kubernetes.io/name: {{ include "jobttl.name" .ctx }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{ include "jobttl.selectorLabels" . }}
{{- end }}

{{/* Pod template labels: the selector's plus podLabels. */}}
{{- define "jobttl.podLabels" -}}
{{ include "jobttl.selectorLabels" . }}
{{- with .ctx.Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Images ------------------------------------------------------------------------------ */}}

{{/* registry/repository:tag[@digest] from an image value: (dict "image" .Values.image "default" tag). */}}
{{- define "jobttl.imageRef" -}}
{{- $repository := .image.repository }}
{{- if .image.registry }}{{ $repository = printf "%s/%s" .image.registry .image.repository }}{{ end }}
{{- $ref := printf "%s:%s" $repository (toString (default .default .image.tag)) }}
{{- if .image.digest }}{{ $ref = printf "%s@%s" $ref .image.digest }}{{ end }}
{{- $ref }}
{{- end }}

{{- define "jobttl.image" -}}
{{- include "jobttl.imageRef" (dict "image" .Values.image "default" .Chart.AppVersion) }}
{{- end }}

{{/* Pod spec parts shared by jobttl's own pods. */}}
{{- define "jobttl.scheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
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
     the worker then reads pods, their logs and Events (jobttl.core.domain.permissions ARCHIVE_PERMISSIONS). */}}
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
     (jobttl.core.domain.permissions POD_CLEANUP_PERMISSIONS). */}}
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
{{- end }}

{{- define "jobttl.extraEnv" -}}
- name: JOBTTL_LOG_LEVEL
  value: {{ .Values.logLevel }}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ toString $value | quote }}
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

{{/* What the schema cannot say: one version per kind and group (no cluster serves two MPIJob
     versions at once, and the RBAC would not tell them apart). */}}
{{- define "jobttl.validate" -}}
{{- $seen := dict }}
{{- range .Values.kinds }}
{{- $key := printf "%s %s" (regexReplaceAll "/[^/]*$" .apiVersion "") .kind }}
{{- if hasKey $seen $key }}
{{- fail (printf "kinds: %s is listed twice (%s and %s); a cluster serves one version of a kind: keep the one it serves" .kind (get $seen $key) .apiVersion) }}
{{- end }}
{{- $_ := set $seen $key .apiVersion }}
{{- end }}
{{- end }}
