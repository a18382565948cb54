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

{{/* Each listener entry, checked: `--set listeners[1]...` alone leaves listeners[0] empty. */}}
{{- define "gateway.listener" -}}
{{- if not (and . (kindIs "map" .) .name .port) -}}
{{- fail "each listeners[] entry needs a name and a port (with --set, give every index: listeners[0].name=http,listeners[0].port=8080,listeners[1].name=...)" -}}
{{- end -}}
{{- end -}}

{{/* `--audit-log` and `--audit-required` from audit.log and audit.required, checked. */}}
{{- define "gateway.auditArgs" -}}
{{- $audit := .Values.audit | default dict -}}
{{- if and $audit.required (not $audit.log) -}}
{{- fail "audit.required needs audit.log (\"-\" for standard output, or a file path)" -}}
{{- end -}}
{{- if $audit.log -}}
{{- if not (or (eq $audit.log "-") (isAbs $audit.log)) -}}
{{- fail (printf "audit.log %q must be \"-\" or an absolute file path" $audit.log) -}}
{{- end -}}
- --audit-log={{ $audit.log }}
{{- if $audit.required }}
- --audit-required
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The directory of audit.log when it is a file (mounted from audit.volume), else empty. */}}
{{- define "gateway.auditDir" -}}
{{- $log := (.Values.audit | default dict).log -}}
{{- if and $log (ne $log "-") -}}{{ dir $log }}{{- end -}}
{{- end -}}
