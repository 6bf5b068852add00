{{/* What the schema cannot say of notifications (templates/notify.yaml): the notifier needs channels,
     and each channel whose URL comes from the environment needs that variable from a Secret. */}}
{{- define "jobttl.validateNotifications" -}}
{{- $channels := .Values.policy.notify | default list }}
{{- if not $channels }}
{{- fail "notifications.enabled: the policy names no channels: set policy.notify (docs/notifications.md), or notifications.enabled=false" }}
{{- end }}
{{- $names := list }}
{{- range .Values.notifications.secretEnv }}{{ $names = append $names .name }}{{ end }}
{{- range $i, $channel := $channels }}
{{- if and (kindIs "map" $channel) (hasKey $channel "urlFromEnv") (not (has $channel.urlFromEnv $names)) }}
{{- fail (printf "policy.notify[%d].urlFromEnv: %s is not set by notifications.secretEnv: add {name: %s, secretName: SECRET, key: KEY}" $i $channel.urlFromEnv $channel.urlFromEnv) }}
{{- end }}
{{- end }}
{{- end }}

{{/* A channel's `url` sits in the policy's ConfigMap: one that may hold a credential is refused here,
     notifications on or off, as every jobttl process refuses it at start (core/domain/notices/notify.py's
     secret_slot; the values schema's pattern already keeps out other schemes, a user or password,
     and +header/-query/:payload parameters). The URL itself is never quoted: it may be the secret. */}}
{{- define "jobttl.validateNotifyURLs" -}}
{{- range $i, $channel := (.Values.policy.notify | default list) }}
{{- if and (kindIs "map" $channel) (hasKey $channel "url") (kindIs "string" $channel.url) }}
{{- $url := trim $channel.url }}
{{- if not (regexMatch "^(jsons?|xmls?|forms?|mailtos?)://[^/?#@[:space:]]+([/?#].*)?$" $url) }}
{{- fail (printf "policy.notify[%d].url: url takes only json(s)://, form(s)://, xml(s)://, mailto(s):// without user or password; a URL with a token (slack://, msteams://, ...) sits in the policy's ConfigMap: put it in a Secret, name it in notifications.secretEnv and use urlFromEnv (docs/notifications.md)" $i) }}
{{- end }}
{{- if regexMatch "(?i)[?&;](%2b|%2d|%3a|[-+:])|[?&;][^=&;#]*(pass|pwd|secret|token|key|auth|bearer|sig|cred|session|cookie|user|login|code)" $url }}
{{- fail (printf "policy.notify[%d].url: a +header, -query or :payload parameter, or one named like a credential (token, pass, key, ...), may hold a secret and would sit in the policy's ConfigMap: put the URL in a Secret, name it in notifications.secretEnv and use urlFromEnv (docs/notifications.md)" $i) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
