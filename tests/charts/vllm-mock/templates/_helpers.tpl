{{- define "vllm-mock.name" -}}
{{- printf "%s-vllm" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vllm-mock.labels" -}}
app: {{ include "vllm-mock.name" . }}
app.kubernetes.io/name: vllm-mock
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The drain budget must fit in the grace period, or SIGKILL lands mid-request. */}}
{{- define "vllm-mock.checkBudget" -}}
{{- $sync := int .Values.endpointSyncSeconds -}}
{{- $drain := int .Values.drainSeconds -}}
{{- $shutdown := int .Values.shutdownTimeout -}}
{{- $grace := int .Values.terminationGracePeriodSeconds -}}
{{- $total := add $sync $drain $shutdown -}}
{{- if gt $total $grace -}}
{{- fail (printf "endpointSyncSeconds (%d) + drainSeconds (%d) + shutdownTimeout (%d) = %d exceeds terminationGracePeriodSeconds (%d): the kubelet would SIGKILL vLLM with requests still running; raise terminationGracePeriodSeconds to at least %d or shorten a step" $sync $drain $shutdown $total $grace $total) -}}
{{- end -}}
{{- end -}}

{{/* The image: repository@digest when a digest is set, else repository:tag. */}}
{{- define "vllm-mock.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the image's vLLM accepts --shutdown-timeout (added in vLLM 0.18.0): a tag whose
first three numbers (a leading v trimmed) are a version >= 0.18.0, any tag that is not a version
(latest, nightly: assumed recent), or a digest (its version cannot be read). Empty otherwise.
*/}}
{{- define "vllm-mock.acceptsShutdownTimeout" -}}
{{- if .Values.image.digest -}}
true
{{- else -}}
{{- $version := regexFind "^[0-9]+\\.[0-9]+\\.[0-9]+" (trimPrefix "v" (toString .Values.image.tag)) -}}
{{- if not $version -}}
true
{{- else if semverCompare ">=0.18.0-0" $version -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
