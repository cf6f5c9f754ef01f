{{- define "graphhub.labels" -}}
app.kubernetes.io/name: graphhub
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/version: {{ .root.Values.appVersion | quote }}
app.kubernetes.io/managed-by: styrmin
{{- end }}

{{- define "graphhub.selector" -}}
app.kubernetes.io/name: graphhub
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "graphhub.appContainer" -}}
image: "{{ .root.Values.image.repository }}:{{ .root.Values.image.tag }}"
envFrom:
  - configMapRef:
      name: {{ .root.Release.Name }}-config
env:
  - name: GRAPHHUB_DATABASE_PASSWORD
    valueFrom:
      secretKeyRef:
        name: {{ .root.Values.databasePassword.name }}
        key: {{ .root.Values.databasePassword.key }}
{{- end }}
