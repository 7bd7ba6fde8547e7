{{/* The chart's name, shortened to the 63 characters a label value allows. */}}
{{- define "karpenter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The fully qualified name: the release name when it already holds the chart's name. */}}
{{- define "karpenter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* name-version, for the helm.sh/chart label. */}}
{{- define "karpenter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "karpenter.labels" -}}
helm.sh/chart: {{ include "karpenter.chart" . }}
{{ include "karpenter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the controller pods. */}}
{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* "true" when a boolean value is true, whether given as true or as the string "true" (--set-string, a quoted
value; the schema allows no other string), else "". A bare `if` would take the string "false" for true. */}}
{{- define "karpenter.true" -}}
{{- if eq (toString .) "true" }}true{{ end }}
{{- end }}

{{/* The ServiceAccount the controller runs as. Without one created and no name, the namespace's "default", as
upstream's chart does. */}}
{{- define "karpenter.serviceAccountName" -}}
{{- if include "karpenter.true" .Values.serviceAccount.create }}
{{- default (include "karpenter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The controller image reference: repository:tag, or repository@digest when a digest is set. The repository
has no default: the image is built from the repository's Dockerfile and pushed to the user's own registry. */}}
{{- define "karpenter.controller.image" -}}
{{- $repository := required "controller.image.repository is required: build the image with the repository's Dockerfile, push it to your ECR repository and set it (--set controller.image.repository=<account>.dkr.ecr.<region>.amazonaws.com/karpenter-rs); see docs/getting-started.md" .Values.controller.image.repository }}
{{- $tag := default .Chart.AppVersion .Values.controller.image.tag }}
{{- if .Values.controller.image.digest }}
{{- printf "%s@%s" $repository .Values.controller.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/* The controller container's name. */}}
{{- define "karpenter.controller.containerName" -}}
{{- default "controller" .Values.controller.containerName }}
{{- end }}

{{/* Whether the cluster serves the Prometheus Operator's API (ServiceMonitor, PodMonitor). */}}
{{- define "karpenter.hasPrometheusOperator" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/* FEATURE_GATES in Kubernetes' map syntax, gate names as the controller spells them; each gate true or false
whether given as a boolean or a string. Gates not listed (accepted by the schema, as upstream's chart ignores
gates it does not know) are left out. */}}
{{- define "karpenter.featureGates" -}}
{{- $g := .Values.settings.featureGates -}}
{{- $gates := list -}}
{{- range list "ReservedCapacity" "SpotToSpotConsolidation" "NodeRepair" "NodeOverlay" "StaticCapacity" "CapacityBuffer" -}}
{{- $gates = append $gates (printf "%s=%t" . (eq (include "karpenter.true" (index $g (untitle .))) "true")) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end }}
