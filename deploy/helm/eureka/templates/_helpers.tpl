{{/* Names. */}}
{{- define "eureka.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "eureka.fullname" -}}
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

{{/* The headless Service (peers' DNS name; the StatefulSet's serviceName). */}}
{{- define "eureka.headlessName" -}}
{{- printf "%s-headless" (include "eureka.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "eureka.headlessFqdn" -}}
{{- printf "%s.%s.svc.%s" (include "eureka.headlessName" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* The Secret with SECRET_KEY, EUREKA_CONTROL_SECRET, EUREKA_METRICS_TOKEN, EUREKA_PEER_PASSWORD. */}}
{{- define "eureka.secretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else }}
{{- include "eureka.fullname" . }}
{{- end }}
{{- end }}

{{- define "eureka.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "eureka.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "eureka.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "eureka.selectorLabels" -}}
app.kubernetes.io/name: {{ include "eureka.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "eureka.labels" -}}
helm.sh/chart: {{ include "eureka.chart" . }}
{{ include "eureka.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: registry
{{- end }}

{{- define "eureka.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where the node listens (deploy/gunicorn.conf.py binds 0.0.0.0:8761). */}}
{{- define "eureka.nodePort" -}}8761{{- end }}

{{/*
EUREKA_PEER_DNS: the headless Service's name and port (A/AAAA: every pod's address becomes a peer
http://IP:8761/eureka/); with API accounts on, a URL with the peer account's credentials, the password
from the environment ($(EUREKA_PEER_PASSWORD), expanded by the kubelet).
*/}}
{{- define "eureka.peerDns" -}}
{{- if .Values.apiAuth.enabled }}
{{- printf "http://%s:$(EUREKA_PEER_PASSWORD)@%s:%s/eureka/" .Values.apiAuth.peerAccount (include "eureka.headlessFqdn" .) (include "eureka.nodePort" .) }}
{{- else }}
{{- printf "%s:%s" (include "eureka.headlessFqdn" .) (include "eureka.nodePort" .) }}
{{- end }}
{{- end }}

{{/*
ALLOWED_HOSTS: as given; narrowed (no "*"), plus the hosts the cluster itself calls the node by.
*/}}
{{- define "eureka.allowedHosts" -}}
{{- if has "*" .Values.allowedHosts }}
{{- join "," .Values.allowedHosts }}
{{- else }}
{{- $full := include "eureka.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := concat .Values.allowedHosts (list "127.0.0.1" "localhost" "$(POD_IP)" $full (printf "%s.%s" $full $ns) (printf "%s.%s.svc" $full $ns) (printf "%s.%s.svc.%s" $full $ns .Values.clusterDomain) (printf ".%s" (include "eureka.headlessFqdn" .))) }}
{{- join "," (uniq $hosts) }}
{{- end }}
{{- end }}

{{/*
Shell lines run before each process (sh -c): with an external Redis, REDIS_URL is the base URL with
the database of this node's StatefulSet ordinal (the pod's name ends in -N).
*/}}
{{- define "eureka.shellPrelude" -}}
set -e
{{- if and .Values.productionMode .Values.redis.external.enabled }}
ordinal="${POD_NAME##*-}"
export REDIS_URL="${EUREKA_REDIS_BASE_URL%/}/$(( ordinal + {{ int .Values.redis.external.databaseOffset }} ))"
{{- end }}
{{- end }}

{{/* The environment every container of a node gets (as Compose's env_file + environment). */}}
{{- define "eureka.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: HOME
  value: /tmp
- name: PYTHONUNBUFFERED
  value: "1"
- name: EUREKA_EMBEDDED
  value: "false"
- name: EUREKA_HTTPS
  value: {{ .Values.https | quote }}
- name: EUREKA_DATA_DIR
  value: /data
- name: SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "eureka.secretName" . }}
      key: SECRET_KEY
- name: EUREKA_CONTROL_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ include "eureka.secretName" . }}
      key: EUREKA_CONTROL_SECRET
- name: EUREKA_CONTROL_URL
  value: http://127.0.0.1:{{ include "eureka.nodePort" . }}
{{- if .Values.productionMode }}
{{- if .Values.redis.external.enabled }}
- name: EUREKA_REDIS_BASE_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.redis.external.existingSecret }}
      name: {{ .Values.redis.external.existingSecret }}
      key: {{ .Values.redis.external.existingSecretKey }}
      {{- else }}
      name: {{ include "eureka.fullname" . }}-connections
      key: REDIS_URL
      {{- end }}
{{- else }}
- name: REDIS_URL
  value: redis://127.0.0.1:6379/0
{{- end }}
{{- end }}
{{- if or .Values.database.url .Values.database.existingSecret }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.database.existingSecret }}
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.existingSecretKey }}
      {{- else }}
      name: {{ include "eureka.fullname" . }}-connections
      key: DATABASE_URL
      {{- end }}
{{- end }}
- name: EUREKA_API_AUTH
  value: {{ .Values.apiAuth.enabled | quote }}
{{- if .Values.apiAuth.enabled }}
- name: EUREKA_PEER_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "eureka.secretName" . }}
      key: EUREKA_PEER_PASSWORD
{{- end }}
- name: EUREKA_PEER_DNS
  value: {{ include "eureka.peerDns" . | quote }}
- name: EUREKA_PEER_DNS_INTERVAL_SECONDS
  value: {{ .Values.peers.dnsIntervalSeconds | quote }}
{{- with .Values.peers.nameservers }}
- name: EUREKA_DNS_NAMESERVERS
  value: {{ join "," . | quote }}
{{- end }}
{{- with .Values.peers.staticUrls }}
- name: EUREKA_PEER_URLS
  value: {{ join "," . | quote }}
{{- end }}
- name: ALLOWED_HOSTS
  value: {{ include "eureka.allowedHosts" . | quote }}
- name: EUREKA_TRUSTED_PROXIES
  value: {{ join "," .Values.trustedProxies | quote }}
- name: FORWARDED_ALLOW_IPS
  value: {{ .Values.forwardedAllowIps | quote }}
- name: EUREKA_METRICS_ENABLED
  value: {{ .Values.metrics.enabled | quote }}
{{- if and .Values.metrics.enabled .Values.metrics.tokenEnabled }}
- name: EUREKA_METRICS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "eureka.secretName" . }}
      key: EUREKA_METRICS_TOKEN
{{- end }}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volume mounts of the app's containers: the data directory and /tmp (read-only root file system). */}}
{{- define "eureka.appMounts" -}}
- name: data
  mountPath: /data
- name: tmp
  mountPath: /tmp
{{- end }}

{{/*
A value kept across upgrades: the given one, else the one in the existing Secret (lookup; empty under
`helm template`), else a random one.
*/}}
{{- define "eureka.keep" -}}
{{- $given := index . 0 }}
{{- $existing := index . 1 }}
{{- $key := index . 2 }}
{{- $length := index . 3 }}
{{- if $given }}
{{- $given }}
{{- else if and $existing (hasKey $existing.data $key) }}
{{- index $existing.data $key | b64dec }}
{{- else }}
{{- randAlphaNum $length }}
{{- end }}
{{- end }}
