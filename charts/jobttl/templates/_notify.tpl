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
