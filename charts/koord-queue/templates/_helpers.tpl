{{/*
Names. The full name prefixes every object; cluster-scoped objects carry it
too, so two releases never collide.
*/}}
{{- define "koord-queue.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "koord-queue.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "koord-queue.webhook.fullname" -}}
{{- printf "%s-webhook" (include "koord-queue.fullname" .) }}
{{- end }}

{{- define "koord-queue.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "koord-queue.fullname" .) }}
{{- end }}

{{- define "koord-queue.certs.fullname" -}}
{{- printf "%s-certs" (include "koord-queue.fullname" .) }}
{{- end }}

{{/* The Secret with the webhook's serving certificate. */}}
{{- define "koord-queue.webhook.secretName" -}}
{{- default (printf "%s-tls" (include "koord-queue.webhook.fullname" .)) .Values.certs.secretName }}
{{- end }}

{{/* The scheduler's Lease, named after the release (never a generic name). */}}
{{- define "koord-queue.scheduler.leaseName" -}}
{{- default (printf "%s-scheduler" .Release.Name) .Values.scheduler.leaderElection.leaseName }}
{{- end }}

{{/* The user the scheduler authenticates as: the only one that may lift a hold. */}}
{{- define "koord-queue.scheduler.user" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "koord-queue.scheduler.fullname" .) }}
{{- end }}

{{- define "koord-queue.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "koord-queue.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: koord-queue
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "webhook"). */}}
{{- define "koord-queue.selectorLabels" -}}
app.kubernetes.io/name: {{ include "koord-queue.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "koord-queue.componentLabels" -}}
{{ include "koord-queue.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* image: (dict "ctx" $ "image" .Values.webhook.image) */}}
{{- define "koord-queue.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{/*
The job kinds Koord-Queue queues, by their extension key (as upstream), with
the API group, version and resources of each. Kept identical to the adapters
of the api crate (a test compares them).
*/}}
{{- define "koord-queue.kindTable" -}}
batchjob:
  group: batch
  version: v1
  resources: [jobs]
tf:
  group: kubeflow.org
  version: v1
  resources: [tfjobs]
pytorch:
  group: kubeflow.org
  version: v1
  resources: [pytorchjobs]
  # The CRD's /scale sets the Worker replicas: updates through it are reviewed.
  subresources: [pytorchjobs/scale]
mpi:
  group: kubeflow.org
  version: v2beta1
  resources: [mpijobs]
ray:
  group: ray.io
  version: v1
  resources: [rayjobs, rayclusters]
spark:
  group: sparkoperator.k8s.io
  version: v1beta2
  resources: [sparkapplications]
argo:
  group: argoproj.io
  version: v1alpha1
  resources: [workflows]
jobset:
  group: jobset.x-k8s.io
  version: v1alpha2
  resources: [jobsets]
trainjob:
  group: trainer.kubeflow.org
  version: v1alpha1
  resources: [trainjobs]
  # A TrainJob's size is read from its runtime (webhook at admission,
  # scheduler when it re-creates a unit).
  reads: [trainingruntimes, clustertrainingruntimes]
pod:
  group: ""
  version: v1
  resources: [pods]
  # An in-place resize changes what a pod runs: reviewed like /scale.
  subresources: [pods/resize]
  # Reviewed by webhooks of their own, only in namespaces labelled
  # koord-queue/queue-pods=true (besides the namespace selector).
  podHooks: true
  # A released pod cannot be gated again: sending it back deletes it.
  schedulerVerbs: [get, list, watch, patch, delete]
lws:
  # A LeaderWorkerSet has no suspend: each replica's pods are one pod group,
  # gated, queued as one unit and released together.
  group: ""
  version: v1
  resources: [pods]
  subresources: [pods/resize]
  # Reviewed by hooks of their own that select the pods by the label the LWS
  # controller sets (leaderworkerset.sigs.k8s.io/name), in every opted-in
  # namespace: no other pod costs a review.
  lwsHooks: true
  # A group's size is read from its LeaderWorkerSet.
  reads: [leaderworkersets]
  readsGroup: leaderworkerset.x-k8s.io
  schedulerVerbs: [get, list, watch, patch, delete]
{{- end }}

{{/* The enabled extension keys in a fixed order, comma-separated; fails when none is. */}}
{{- define "koord-queue.enabledKinds" -}}
{{- $enabled := list }}
{{- range $key := list "batchjob" "tf" "pytorch" "mpi" "ray" "spark" "argo" "jobset" "trainjob" "pod" "lws" }}
{{- $ext := index $.Values.extension $key }}
{{- if and $ext $ext.enable }}
{{- $enabled = append $enabled $key }}
{{- end }}
{{- end }}
{{- if not $enabled }}
{{- fail "no job kind is enabled: set at least one of extension.<batchjob|tf|pytorch|mpi|ray|spark|argo|jobset|trainjob|pod|lws>.enable=true" }}
{{- end }}
{{- join "," $enabled }}
{{- end }}

{{/* Whether the scheduler configuration enables a plugin: (dict "ctx" $ "plugin" "ResourceQuota") */}}
{{- define "koord-queue.scheduler.hasPlugin" -}}
{{- range .ctx.Values.scheduler.config.plugins }}
{{- if eq .name $.plugin }}true{{- end }}
{{- end }}
{{- end }}

{{/* Default pod anti-affinity: spread a component's replicas over nodes. */}}
{{- define "koord-queue.affinity" -}}
{{- if .values.affinity }}
{{- toYaml .values.affinity }}
{{- else }}
podAntiAffinity:
  {{- if eq .values.podAntiAffinity "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "koord-queue.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 10 }}
  {{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "koord-queue.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 12 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* The CA bundle of provided mode, base64 (PEM given as text or as base64). */}}
{{- define "koord-queue.providedCaBundle" -}}
{{- $ca := .Values.certs.provided.caBundle }}
{{- if contains "-----BEGIN" $ca }}
{{- $ca | b64enc }}
{{- else }}
{{- $ca | trim }}
{{- end }}
{{- end }}

{{/* The visibility API's Service, served by the scheduler pods. */}}
{{- define "koord-queue.visibility.fullname" -}}
{{- printf "%s-visibility" (include "koord-queue.fullname" .) }}
{{- end }}

{{/* The Secret with the visibility API's serving certificate. */}}
{{- define "koord-queue.visibility.secretName" -}}
{{- default (printf "%s-tls" (include "koord-queue.visibility.fullname" .)) .Values.visibility.secretName }}
{{- end }}

{{/* The APIService: <version>.<group>, as the aggregation layer requires. */}}
{{- define "koord-queue.visibility.apiService" -}}
v1alpha1.visibility.koord-queue.io
{{- end }}
