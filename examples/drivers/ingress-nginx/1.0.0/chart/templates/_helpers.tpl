{{- define "ingress-nginx.selector" -}}
app.kubernetes.io/name: ingress-nginx
app.kubernetes.io/component: controller
{{- end -}}

{{- define "ingress-nginx.labels" -}}
{{ include "ingress-nginx.selector" . }}
app.kubernetes.io/managed-by: styrmin
{{- end -}}
