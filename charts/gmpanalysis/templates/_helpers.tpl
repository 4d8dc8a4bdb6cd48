{{/* The name of an object: the prefix and the part, e.g. gmp-sampler. */}}
{{- define "gmp.name" -}}
{{- printf "%s-%s" .root.Values.namePrefix .part | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
What selects a component's pods: app.kubernetes.io/name only, as the manifests before the
chart had it (a DaemonSet's selector cannot change in place) and as `gmpanalysis collect`
finds the sampler pods (app.kubernetes.io/name=gmp-sampler).
*/}}
{{- define "gmp.selectorLabels" -}}
app.kubernetes.io/name: gmp-{{ .part }}
{{- end -}}

{{/* Labels of every object: its component, the release, the chart and app versions. */}}
{{- define "gmp.labels" -}}
{{ include "gmp.selectorLabels" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .part }}
app.kubernetes.io/part-of: gmpanalysis
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gmp.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Scheduling and pull settings shared by both DaemonSets' pods (.c: the component's values). */}}
{{- define "gmp.podScheduling" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
