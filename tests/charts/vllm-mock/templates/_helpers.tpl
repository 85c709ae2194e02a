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
