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

{{/* The admin and health listeners' ports, checked: one each, apart from every listener's. */}}
{{- define "gateway.ownPorts" -}}
{{- $admin := int .Values.adminPort -}}
{{- $health := int .Values.healthPort -}}
{{- range $name, $port := dict "adminPort" $admin "healthPort" $health -}}
{{- if or (lt $port 1) (gt $port 65535) -}}
{{- fail (printf "%s %d is no port: give a number from 1 to 65535" $name $port) -}}
{{- end -}}
{{- end -}}
{{- if eq $admin $health -}}
{{- fail (printf "healthPort %d is adminPort too: give the health listener (the probes) and the admin listener (/config, /status, /metrics) a port each" $health) -}}
{{- end -}}
{{- range .Values.listeners -}}
{{- if and (kindIs "map" .) .port (has (int .port) (list $admin $health)) -}}
{{- fail (printf "listeners[] %v: port %d is adminPort or healthPort, the gateway's own listeners: give it another port" .name (int .port)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The peer adminAccess admits to the admin listener (YAML), or empty: nobody, and the admin
listener stays on the pod's loopback. Refused without the NetworkPolicy that would hold it. */}}
{{- define "gateway.adminPeer" -}}
{{- $access := .Values.adminAccess | default dict -}}
{{- $peer := dict -}}
{{- with $access.namespaceSelector }}{{ $_ := set $peer "namespaceSelector" . }}{{ end -}}
{{- with $access.podSelector }}{{ $_ := set $peer "podSelector" . }}{{ end -}}
{{- if $peer -}}
{{- if not (.Values.networkPolicy | default dict).enabled -}}
{{- fail "adminAccess needs networkPolicy.enabled: without the NetworkPolicy the admin listener (/config, /status, /metrics) would be open to every pod" -}}
{{- end -}}
{{- toYaml $peer -}}
{{- end -}}
{{- end -}}

{{/* userOAuth's key file and store (userTokens): the flags, or nothing when off. */}}
{{- define "gateway.userTokenArgs" -}}
{{- $tokens := .Values.userTokens | default dict -}}
{{- if $tokens.keySecret -}}
{{- if and (gt (int .Values.replicas) 1) (not $tokens.store.existingSecret) -}}
{{- fail "userTokens.store.existingSecret is required with several replicas: each would keep its own SQLite file of users' grants; give a Secret holding a redis:// URL" -}}
{{- end -}}
- --user-token-key=/etc/mcp-oauth-gateway/user-tokens/key
{{- if $tokens.store.existingSecret }}
- --user-token-store=$(USER_TOKEN_STORE)
{{- else }}
- --user-token-store=sqlite:///var/lib/mcp-oauth-gateway/user-tokens.db
{{- end -}}
{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: the preStop wait, the drain (--grace-period) and 10 s for
the process to stop, the two values checked. */}}
{{- define "gateway.terminationGrace" -}}
{{- $drain := .Values.drain | default dict -}}
{{- $wait := int $drain.preStopSeconds -}}
{{- $grace := int $drain.gracePeriodSeconds -}}
{{- if lt $wait 0 -}}
{{- fail (printf "drain.preStopSeconds %d: give the seconds to keep serving before draining (0 for none)" $wait) -}}
{{- end -}}
{{- if lt $grace 1 -}}
{{- fail (printf "drain.gracePeriodSeconds %d: give the seconds requests in flight may run after SIGTERM, at least 1" $grace) -}}
{{- end -}}
{{- add $wait $grace 10 -}}
{{- end -}}
