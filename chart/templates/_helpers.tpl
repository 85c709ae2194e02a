{{/* The chart's name, or nameOverride: the app.kubernetes.io/name label and part of the full name. */}}
{{- define "llmscaleoperator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, at most 63 characters: fullnameOverride, or the release name
     followed by the chart's name (unless it already contains it). Every object is named after it. */}}
{{- define "llmscaleoperator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "llmscaleoperator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "llmscaleoperator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llmscaleoperator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "llmscaleoperator.labels" -}}
{{ include "llmscaleoperator.selectorLabels" . }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: llmscaleoperator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The annotations block of an object's metadata: commonAnnotations and the object's own
     (`list $ctx $own`; its own win), or nothing when both are empty. */}}
{{- define "llmscaleoperator.annotations" -}}
{{- $ctx := index . 0 -}}
{{- $all := merge (dict) (index . 1 | default dict) ($ctx.Values.commonAnnotations | default dict) -}}
{{- with $all -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{- define "llmscaleoperator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "llmscaleoperator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "llmscaleoperator.image" -}}
{{- $image := .Values.manager.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the serving certificate of the external metrics API. */}}
{{- define "llmscaleoperator.certSecret" -}}
{{- $cert := .Values.externalMetrics.certificate -}}
{{- if eq $cert.source "existingSecret" -}}
{{- required "externalMetrics.certificate.existingSecret is required with source existingSecret" $cert.existingSecret -}}
{{- else -}}
{{- default (printf "%s-extmetrics-tls" (include "llmscaleoperator.fullname" .)) $cert.secretName -}}
{{- end -}}
{{- end -}}

{{/* Whether the operator writes the APIService (and its caBundle) itself. */}}
{{- define "llmscaleoperator.registers" -}}
{{- if and .Values.externalMetrics.enabled .Values.externalMetrics.apiService.enabled (eq .Values.externalMetrics.certificate.source "selfManaged") -}}
true
{{- end -}}
{{- end -}}

{{/* What the controller needs in every namespace it watches. Each rule is needed by at least one
     behaviour; tests/chart_rbac.rs fails when any one is removed. */}}
{{- define "llmscaleoperator.controllerRules" }}
- apiGroups: [autoscaling.modelsphere.dev]
  resources: [llmscalers]
  verbs: [list, watch]
- apiGroups: [autoscaling.modelsphere.dev]
  resources: [llmscalers/status]
  verbs: [patch]
- apiGroups: [apps]
  resources: [deployments, statefulsets]
  verbs: [list, watch, patch]
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [list, watch, patch]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [list]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [list, watch]
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [list, watch]
{{- if .Values.rbac.secretHeaders }}
{{- /* The operator only gets the Secrets a scaler names (src/controller/secrets.rs: no list, no
     watch), so resourceNames limits all it can read. */}}
- apiGroups: [""]
  resources: [secrets]
  {{- with .Values.rbac.secretNames }}
  resourceNames:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  verbs: [get]
{{- end }}
{{- end }}
