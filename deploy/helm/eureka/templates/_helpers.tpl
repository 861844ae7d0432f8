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
from the environment ($(EUREKA_PEER_PASSWORD), expanded by the kubelet). With TLS, the Service's SRV
records instead (_http._tcp.NAME): each peer is then called by its pod's DNS name
(NAME-N.HEADLESS.NAMESPACE.svc...), which its certificate names, over https.
*/}}
{{- define "eureka.peerDns" -}}
{{- $credentials := "" }}
{{- if .Values.apiAuth.enabled }}
{{- $credentials = printf "%s:$(EUREKA_PEER_PASSWORD)@" .Values.apiAuth.peerAccount }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- printf "https://%s_http._tcp.%s/eureka/" $credentials (include "eureka.headlessFqdn" .) }}
{{- else if .Values.apiAuth.enabled }}
{{- printf "http://%s%s:%s/eureka/" $credentials (include "eureka.headlessFqdn" .) (include "eureka.nodePort" .) }}
{{- else }}
{{- printf "%s:%s" (include "eureka.headlessFqdn" .) (include "eureka.nodePort" .) }}
{{- end }}
{{- end }}

{{/* http, or https when the node serves TLS itself (tls.enabled). */}}
{{- define "eureka.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/* The kubernetes.io/tls Secret the nodes serve with: tls.secretName, or the one cert-manager fills. */}}
{{- define "eureka.tlsSecretName" -}}
{{- if .Values.tls.secretName }}
{{- .Values.tls.secretName }}
{{- else }}
{{- printf "%s-tls" (include "eureka.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Where the containers find the TLS Secret's files and the client CA bundle. */}}
{{- define "eureka.tlsDir" -}}/etc/eureka/tls{{- end }}
{{- define "eureka.clientCaFile" -}}
{{- if .Values.tls.clientCaSecret }}/etc/eureka/client-ca/ca.crt{{ else }}{{ include "eureka.tlsDir" . }}/{{ .Values.tls.caKey }}{{ end }}
{{- end }}

{{/*
One probe of the registry or a reader container: GET path on its port (list: root, path, port name,
port number), over HTTPS when TLS is on (the readers serve it too). With
tls.clientAuth=required the kubelet, which presents no certificate, could not finish a handshake, so
the probe runs a small Python client in the container that presents the node's own certificate (the
kubelet does not verify the server either).
*/}}
{{- define "eureka.probe" -}}
{{- $root := index . 0 }}
{{- $path := index . 1 }}
{{- $portName := index . 2 }}
{{- $portNumber := index . 3 }}
{{- if and $root.Values.tls.enabled (eq $root.Values.tls.clientAuth "required") }}
exec:
  command:
    - python
    - -I
    - -c
    - |
      import http.client, ssl, sys
      context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
      context.check_hostname = False
      context.verify_mode = ssl.CERT_NONE
      context.load_cert_chain("{{ include "eureka.tlsDir" $root }}/tls.crt", "{{ include "eureka.tlsDir" $root }}/tls.key")
      connection = http.client.HTTPSConnection("127.0.0.1", {{ $portNumber }}, context=context, timeout=5)
      connection.request("GET", "{{ $path }}")
      sys.exit(0 if connection.getresponse().status == 200 else 1)
{{- else }}
httpGet:
  path: {{ $path }}
  port: {{ $portName }}
  {{- if $root.Values.tls.enabled }}
  scheme: HTTPS
  {{- end }}
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
  value: {{ or .Values.https .Values.tls.enabled | quote }}
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
  value: {{ include "eureka.scheme" . }}://127.0.0.1:{{ include "eureka.nodePort" . }}
{{- if .Values.tls.enabled }}
- name: EUREKA_TLS_CERT_FILE
  value: {{ include "eureka.tlsDir" . }}/tls.crt
- name: EUREKA_TLS_KEY_FILE
  value: {{ include "eureka.tlsDir" . }}/tls.key
- name: EUREKA_TLS_CLIENT_AUTH
  value: {{ .Values.tls.clientAuth | quote }}
{{- if ne .Values.tls.clientAuth "none" }}
- name: EUREKA_TLS_CLIENT_CA_FILE
  value: {{ include "eureka.clientCaFile" . }}
{{- end }}
{{- with .Values.tls.caKey }}
- name: EUREKA_OUTBOUND_CA_FILE
  value: {{ include "eureka.tlsDir" $ }}/{{ . }}
{{- end }}
- name: EUREKA_OUTBOUND_CERT_FILE
  value: {{ include "eureka.tlsDir" . }}/tls.crt
- name: EUREKA_OUTBOUND_KEY_FILE
  value: {{ include "eureka.tlsDir" . }}/tls.key
{{- end }}
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

{{/*
Volume mounts of the app's containers: the data directory and /tmp (read-only root file system), and
with TLS the Secret's files (every container reads the settings, which name them). A Secret mounted
as a directory (no subPath) is updated in place by the kubelet when it changes, so a renewed
certificate reaches the node, which reloads it, without a restart.
*/}}
{{- define "eureka.appMounts" -}}
- name: data
  mountPath: /data
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: {{ include "eureka.tlsDir" . }}
  readOnly: true
{{- if and .Values.tls.clientCaSecret (ne .Values.tls.clientAuth "none") }}
- name: client-ca
  mountPath: /etc/eureka/client-ca
  readOnly: true
{{- end }}
{{- end }}
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
