{{/* Names, labels and shared snippets of the slingshot chart. */}}

{{- define "slingshot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slingshot.fullname" -}}
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

{{- define "slingshot.agent.fullname" -}}
{{- printf "%s-agent" (include "slingshot.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slingshot.controller.fullname" -}}
{{- printf "%s-controller" (include "slingshot.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "slingshot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "slingshot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slingshot
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels; pass (dict "ctx" $ "component" "agent"). */}}
{{- define "slingshot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slingshot.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Image reference; pass (dict "ctx" $ "name" IMAGE). */}}
{{- define "slingshot.image" -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .ctx.Values.image.registry) .name (default .ctx.Chart.AppVersion .ctx.Values.image.tag) }}
{{- end }}

{{/* The agent's ServiceAccount user name, as TokenReview reports it. */}}
{{- define "slingshot.agent.user" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "slingshot.agent.fullname" .) }}
{{- end }}

{{/* The controller's gRPC address as the agents dial it. */}}
{{- define "slingshot.controller.address" -}}
{{- printf "%s.%s.svc:%v" (include "slingshot.controller.fullname" .) .Release.Namespace .Values.controller.ports.grpc }}
{{- end }}

{{/* Who provides the controller's gRPC certificate: "secret" (the user's
controller.tls.secretName), "cert-manager", "helm", or nothing when the
controller is off or its gRPC is plaintext (controller.tls.enabled=false). */}}
{{- define "slingshot.controller.tlsProvider" -}}
{{- $t := .Values.controller.tls }}
{{- if and .Values.controller.enabled $t.enabled }}
{{- if $t.secretName }}secret
{{- else if eq $t.provider "cert-manager" }}cert-manager
{{- else if eq $t.provider "helm" }}helm
{{- else if .Capabilities.APIVersions.Has "cert-manager.io/v1" }}cert-manager
{{- else }}helm
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret of the controller's gRPC certificate (tls.crt, tls.key,
ca.crt). */}}
{{- define "slingshot.controller.tlsSecret" -}}
{{- default (printf "%s-tls" (include "slingshot.controller.fullname" .)) .Values.controller.tls.secretName }}
{{- end }}

{{/* The DNS names of the controller's certificate, as a JSON list: the
Service's names and controller.tls.dnsNames. */}}
{{- define "slingshot.controller.dnsNames" -}}
{{- $svc := include "slingshot.controller.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- concat (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) .Values.controller.tls.dnsNames | toJson }}
{{- end }}

{{/* The agent's configuration file: values with the CDI directory filled in,
and nicResource.hsnInterface from agent.hsnInterface when that is enabled. */}}
{{- define "slingshot.agent.config" -}}
{{- $cfg := deepCopy .Values.agent.config }}
{{- $cdi := default dict (get $cfg "cdi") }}
{{- if not (hasKey $cdi "specDir") }}
{{- $_ := set $cdi "specDir" .Values.agent.cdiDir }}
{{- end }}
{{- $_ := set $cfg "cdi" $cdi }}
{{- $h := .Values.agent.hsnInterface }}
{{- if $h.enabled }}
{{- $hsn := dict "enabled" true "mode" $h.mode "name" $h.name "pool" $h.pool }}
{{- if $h.mtu }}
{{- $_ := set $hsn "mtu" $h.mtu }}
{{- end }}
{{- if $h.allNICs }}
{{- $_ := set $hsn "allNICs" true }}
{{- end }}
{{- if $h.poolByNetdev }}
{{- $_ := set $hsn "poolByNetdev" $h.poolByNetdev }}
{{- end }}
{{- $nic := default dict (get $cfg "nicResource") }}
{{- $_ := set $nic "hsnInterface" $hsn }}
{{- $_ := set $cfg "nicResource" $nic }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* The names of controller.ipPools (NAME=PREFIX:/LEN, comma-separated), as a
JSON list. */}}
{{- define "slingshot.controller.ipPoolNames" -}}
{{- $names := list }}
{{- range splitList "," .Values.controller.ipPools }}
{{- $name := trim (first (splitList "=" .)) }}
{{- if $name }}
{{- $names = append $names $name }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{/* Fails rendering on values that cannot work together. */}}
{{- define "slingshot.validate" -}}
{{- if not (has .Values.api (list "deviceplugin" "dra")) }}
{{- fail (printf "api %q: want deviceplugin or dra" .Values.api) }}
{{- end }}
{{- if eq .Values.api "dra" }}
{{- $d := .Values.dra }}
{{- if or (not (kindIs "string" $d.driverName)) (gt (len $d.driverName) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $d.driverName)) }}
{{- fail (printf "dra.driverName %v: want a DNS subdomain of at most 63 characters, as a DRA driver's name must be" $d.driverName) }}
{{- end }}
{{- if or (not $d.nriSocket) (not (isAbs $d.nriSocket)) (gt (len $d.nriSocket) 107) (eq (dir $d.nriSocket) "/") }}
{{- fail (printf "dra.nriSocket %q: want an absolute path of at most 107 bytes (a unix socket's limit) in a directory other than /" $d.nriSocket) }}
{{- end }}
{{- if and $d.extendedResource.enabled (not $d.deviceClasses) }}
{{- fail "dra.extendedResource.enabled needs dra.deviceClasses: the extended resource name is a field of the chart's NIC DeviceClass" }}
{{- end }}
{{- if not (.Capabilities.APIVersions.Has "resource.k8s.io/v1") }}
{{- fail "api=dra needs a cluster that serves resource.k8s.io/v1 (Kubernetes 1.34 or later); with helm template, pass --api-versions resource.k8s.io/v1" }}
{{- end }}
{{- end }}
{{- if not (has .Values.agent.cxiDriver (list "uapi" "sim")) }}
{{- fail (printf "agent.cxiDriver %q: want uapi or sim" .Values.agent.cxiDriver) }}
{{- end }}
{{- $cf := toString .Values.agent.checkpointFormat }}
{{- if not (has $cf (list "3" "4")) }}
{{- fail (printf "agent.checkpointFormat %q: want 3 (read by release 0.2.0) or 4" $cf) }}
{{- end }}
{{- if and (eq $cf "4") (ne (toString .Values.agent.checkpointFormatAllowNoRollback) "true") }}
{{- fail "agent.checkpointFormat=4: the agents of release 0.2.0 cannot read a format 4 checkpoint. After a helm rollback (or any downgrade of the agents) to 0.2.0 every agent would refuse its checkpoint and not start, and the CXI services of running jobs would have no agent to clean them up or bind new pods. Keep 3 while a rollback to 0.2.0 may be needed; to write 4 anyway, also set agent.checkpointFormatAllowNoRollback=true. To go back to 0.2.0 later, first set agent.checkpointFormat=3 and wait for the agents' rollout (each rewrites its checkpoint in format 3 as it starts), then roll back (docs/upgrade.md)." }}
{{- end }}
{{- if and (eq .Values.agent.cxiDriver "uapi") (not .Values.agent.privileged) }}
{{- fail "agent.privileged=false needs agent.cxiDriver=sim: an unprivileged container cannot open the host's /dev/cxiN" }}
{{- end }}
{{- $ipam := .Values.ipam }}
{{- if $ipam.socket }}
{{- if or (not (isAbs $ipam.socket)) (gt (len $ipam.socket) 107) (eq (dir $ipam.socket) "/") }}
{{- fail (printf "ipam.socket %q: want an absolute path of at most 107 bytes (a unix socket's limit) in a directory other than /, or empty" $ipam.socket) }}
{{- end }}
{{- end }}
{{- if and $ipam.installPlugin (or (not $ipam.cniBinDir) (not (isAbs $ipam.cniBinDir)) (eq (clean $ipam.cniBinDir) "/")) }}
{{- fail (printf "ipam.cniBinDir %q: want the node's CNI bin dir, an absolute path other than /" $ipam.cniBinDir) }}
{{- end }}
{{- $h := .Values.agent.hsnInterface }}
{{- if $h.enabled }}
{{- if not (has $h.mode (list "macvlan" "ipvlan")) }}
{{- fail (printf "agent.hsnInterface.mode %q: want macvlan or ipvlan" $h.mode) }}
{{- end }}
{{- if and .Values.controller.enabled (not (has $h.pool (include "slingshot.controller.ipPoolNames" . | fromJsonArray))) }}
{{- fail (printf "agent.hsnInterface.pool %q is not a pool of controller.ipPools %q: the agents would have no addresses to give" $h.pool .Values.controller.ipPools) }}
{{- end }}
{{- range $dev, $pool := $h.poolByNetdev }}
{{- if and $.Values.controller.enabled (not (has $pool (include "slingshot.controller.ipPoolNames" $ | fromJsonArray))) }}
{{- fail (printf "agent.hsnInterface.poolByNetdev.%s %q is not a pool of controller.ipPools %q: the agents would have no addresses to give" $dev $pool $.Values.controller.ipPools) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.metacontroller.enabled (not .Values.controller.enabled) }}
{{- fail "metacontroller.enabled needs controller.enabled: the hooks are served by the controller" }}
{{- end }}
{{- $c := .Values.controller }}
{{- if not (has $c.tls.provider (list "auto" "cert-manager" "helm")) }}
{{- fail (printf "controller.tls.provider %q: want auto, cert-manager or helm" $c.tls.provider) }}
{{- end }}
{{- if not (has $c.store (list "sqlite" "kube")) }}
{{- fail (printf "controller.store %q: want sqlite or kube" $c.store) }}
{{- end }}
{{- $r := $c.replicas }}
{{- if or (not (or (kindIs "float64" $r) (kindIs "int64" $r) (kindIs "int" $r))) (ne (float64 (int $r)) (float64 $r)) (lt (int $r) 0) }}
{{- fail (printf "controller.replicas %v: want a whole number, 0 or more" $r) }}
{{- end }}
{{- if and $c.enabled (gt (int $c.replicas) 1) }}
{{- if ne $c.store "kube" }}
{{- fail (printf "controller.replicas=%d needs controller.store=kube: the sqlite store has one writer, so one replica" (int $c.replicas)) }}
{{- end }}
{{- if not $c.leaderElect }}
{{- fail (printf "controller.replicas=%d needs controller.leaderElect=true: replicas without an election would all serve and fence each other's writes in turn" (int $c.replicas)) }}
{{- end }}
{{- end }}
{{- end }}

{{/* True (non-empty) when the controller runs the leader election. */}}
{{- define "slingshot.controller.elect" -}}
{{- if and (eq .Values.controller.store "kube") .Values.controller.leaderElect }}true{{ end }}
{{- end }}

{{/* Name of the controller's election Lease and of its store's head
StoreJournal: fixed in cmd/slingshot-controller, not the release's name. */}}
{{- define "slingshot.controller.leaseName" -}}
slingshot-controller
{{- end }}
