{{/*
The objects keep the names of the kustomize base (config/): one agent per
cluster, and docs/tenancy.md, the admission policy and the tenancy example
name them.
*/}}
{{- define "styrmin-agent.name" -}}styrmin-agent{{- end }}

{{- define "styrmin-agent.labels" -}}
app.kubernetes.io/name: styrmin-agent
app.kubernetes.io/part-of: styrmin
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "styrmin-agent.tag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end }}

{{- define "styrmin-agent.selectorLabels" -}}
app.kubernetes.io/name: styrmin-agent
{{- end }}

{{- define "styrmin-agent.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The service account the agent runs as: what the admission policy trusts. */}}
{{- define "styrmin-agent.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:styrmin-agent
{{- end }}
