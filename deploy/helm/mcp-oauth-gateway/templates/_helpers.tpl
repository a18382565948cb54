{{/* The one name every object carries (as deploy/ names them). */}}
{{- define "gateway.name" -}}mcp-oauth-gateway{{- end -}}

{{- define "gateway.labels" -}}
app.kubernetes.io/name: {{ include "gateway.name" . }}
{{- end -}}

{{/* A port name: DNS label, at most 15 characters. */}}
{{- define "gateway.portName" -}}
{{- if or (gt (len .) 15) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .)) -}}
{{- fail (printf "listeners[].name %q must be a DNS label of at most 15 characters" .) -}}
{{- end -}}
{{- . -}}
{{- end -}}
