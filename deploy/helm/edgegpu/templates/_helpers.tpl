{{/*
Names. The release name "edgegpu" (the Rancher default and the documented one) gives exactly
the names of the static manifests in deploy/, which deploy/generate.sh renders from this chart.
*/}}
{{- define "edgegpu.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The namespace of the chart's objects: namespaceOverride (NVIDIA's value), else the release's. */}}
{{- define "edgegpu.namespace" -}}
{{- /* namespace: NVIDIA's chart up to v0.11 had it, with namespaceOverride's meaning. */ -}}
{{- .Values.namespaceOverride | default .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{/*
Labels only a Helm release carries (with app.kubernetes.io/instance on objects and pods).
deploy/generate.sh removes exactly these three keys from the static manifests: a
kubectl-applied object must not claim to be managed by Helm.
*/}}
{{- define "edgegpu.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
Selector labels of one component: dict "root" $ "name" <app name> "component" <"" or variant>.
Also what a Service or PodMonitor for that component selects. Deliberately without the
release (app.kubernetes.io/instance): a DaemonSet's selector cannot change, and with the
same selector as the static manifests (deploy/) a release can take over the DaemonSets that
kubectl or k3s created (docs/helm.md, "From the static manifests"). Two releases in one
namespace would select each other's pods, but two plugins on a node are wrong anyway.
*/}}
{{- define "edgegpu.selectorLabels" -}}
app.kubernetes.io/name: {{ .name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* Pod template labels: the selector plus the release and part-of. */}}
{{- define "edgegpu.podLabels" -}}
{{ include "edgegpu.selectorLabels" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: edgegpu
{{- end -}}

{{/* Object labels: the pod labels, version and the release labels. */}}
{{- define "edgegpu.labels" -}}
{{ include "edgegpu.podLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "edgegpu.releaseLabels" .root }}
{{- end -}}

{{/*
The registry in front of every image: Rancher's system default registry (Rancher sets
global.cattle.systemDefaultRegistry and global.systemDefaultRegistry on every install; a
parent chart may set global.systemDefaultRegistry), "" for none.
*/}}
{{- define "edgegpu.systemDefaultRegistry" -}}
{{- $global := .Values.global | default dict -}}
{{- dig "cattle" "systemDefaultRegistry" "" $global | default (get $global "systemDefaultRegistry") | default "" | trimSuffix "/" -}}
{{- end -}}

{{/*
[registry/]repository:tag of an image block: dict "root" $ "image" <block>. Tag "" = appVersion
(an integer tag, as NVIDIA's chart allows, is written as such). The system default registry
is put in front, as Rancher's own charts do for air-gapped clusters, unless the repository
already starts with it.
*/}}
{{- define "edgegpu.image" -}}
{{- $registry := include "edgegpu.systemDefaultRegistry" .root -}}
{{- $repository := .image.repository -}}
{{- if and $registry (not (hasPrefix (printf "%s/" $registry) $repository)) -}}
{{- $repository = printf "%s/%s" $registry $repository -}}
{{- end -}}
{{- printf "%s:%s" $repository (.image.tag | default .root.Chart.AppVersion | toString) -}}
{{- end -}}

{{/*
The built-in node affinity of each plugin DaemonSet, in flow style (the Yocto layer's checks
read the edgegpu.io/gpu values from the rendered manifests). The two select disjoint node sets:
a node labelled edgegpu.io/gpu wins over what NFD or the GPU Operator found, and any other value
(e.g. host, on a node whose plugin runs as a host service: docs/yocto.md "Host mode") runs
neither plugin, so that a node never gets two.
*/}}
{{- define "edgegpu.plugin.defaultAffinity.jetson" -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - {key: edgegpu.io/gpu, operator: In, values: [jetson]}
          - {key: kubernetes.io/arch, operator: In, values: [arm64]}
      - matchExpressions:
          - {key: feature.node.kubernetes.io/cpu-model.vendor_id, operator: In, values: [NVIDIA]}
          - {key: edgegpu.io/gpu, operator: DoesNotExist}
          - {key: kubernetes.io/arch, operator: In, values: [arm64]}
{{- end -}}

{{- define "edgegpu.plugin.defaultAffinity.discrete" -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - {key: edgegpu.io/gpu, operator: In, values: [discrete]}
      - matchExpressions:
          - {key: nvidia.com/gpu.present, operator: In, values: ["true"]}
          - {key: edgegpu.io/gpu, operator: DoesNotExist}
          - {key: feature.node.kubernetes.io/cpu-model.vendor_id, operator: NotIn, values: [NVIDIA]}
      - matchExpressions:
          - {key: feature.node.kubernetes.io/pci-10de.present, operator: In, values: ["true"]}
          - {key: edgegpu.io/gpu, operator: DoesNotExist}
          - {key: feature.node.kubernetes.io/cpu-model.vendor_id, operator: NotIn, values: [NVIDIA]}
{{- end -}}

{{/*
The default affinity of NVIDIA's chart (any node NFD or the GPU Operator labelled as having an
NVIDIA GPU), which values exported from that chart carry. The built-in affinities select the
same labels, split by kind of node, so this value means "no override" here.
*/}}
{{- define "edgegpu.nvidiaDefaultAffinity" -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - {key: feature.node.kubernetes.io/pci-10de.present, operator: In, values: ["true"]}
      - matchExpressions:
          - {key: feature.node.kubernetes.io/cpu-model.vendor_id, operator: In, values: [NVIDIA]}
      - matchExpressions:
          - {key: nvidia.com/gpu.present, operator: In, values: ["true"]}
{{- end -}}

{{/* An affinity as JSON with its required node selector terms sorted (their order means nothing). */}}
{{- define "edgegpu.canonicalAffinity" -}}
{{- $copy := deepCopy . -}}
{{- $required := dig "nodeAffinity" "requiredDuringSchedulingIgnoredDuringExecution" dict $copy -}}
{{- if kindIs "slice" $required.nodeSelectorTerms -}}
{{- $terms := list -}}
{{- range $required.nodeSelectorTerms -}}
{{- $terms = append $terms (toJson .) -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" (sortAlpha $terms) -}}
{{- end -}}
{{- toJson $copy -}}
{{- end -}}

{{/*
The top-level affinity as JSON when it replaces the built-in ones; "" when it is unset, "" (NVIDIA's
chart allows that) or NVIDIA's default affinity.
*/}}
{{- define "edgegpu.affinityOverride" -}}
{{- $affinity := .Values.affinity -}}
{{- if and $affinity (kindIs "map" $affinity) -}}
{{- $nvidia := include "edgegpu.nvidiaDefaultAffinity" . | fromYaml -}}
{{- if ne (include "edgegpu.canonicalAffinity" $affinity) (include "edgegpu.canonicalAffinity" $nvidia) -}}
{{- toJson $affinity -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The affinity a plugin DaemonSet gets, as YAML text: its own override, else the top-level one
(validated: only with one DaemonSet enabled), else the built-in one. dict "root" $ "variant" v.
*/}}
{{- define "edgegpu.plugin.gpuAffinity" -}}
{{- $own := (index .root.Values.devicePlugin .variant).affinity -}}
{{- $override := include "edgegpu.affinityOverride" .root -}}
{{- if $own -}}
{{- toYaml $own -}}
{{- else if $override -}}
{{- $override | fromJson | toYaml -}}
{{- else -}}
{{- include (printf "edgegpu.plugin.defaultAffinity.%s" .variant) .root -}}
{{- end -}}
{{- end -}}

{{/*
The kinds of GPU node the chart serves (devicePlugin.enabled and devicePlugin.<variant>.enabled),
as a list: each gets a plugin DaemonSet, and with dra.enabled a DRA driver DaemonSet.
*/}}
{{- define "edgegpu.gpuVariants" -}}
{{- $enabled := list -}}
{{- if .Values.devicePlugin.enabled -}}
{{- range $variant := list "jetson" "discrete" -}}
{{- if (index $.Values.devicePlugin $variant).enabled -}}
{{- $enabled = append $enabled $variant -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $enabled -}}
{{- end -}}

{{/* "true" when the DRA driver is deployed (dra may be null in hand-written values), else "". */}}
{{- define "edgegpu.dra.enabled" -}}
{{- if dig "dra" "enabled" false .Values.AsMap -}}true{{- end -}}
{{- end -}}

{{/* "true" when every GPU node runs the DRA driver and no plugin DaemonSet is rendered. */}}
{{- define "edgegpu.dra.allNodes" -}}
{{- if and (include "edgegpu.dra.enabled" .) (dig "dra" "allNodes" false .Values.AsMap) -}}true{{- end -}}
{{- end -}}

{{/* The plugin variants that are rendered, as a list (none when dra.allNodes). */}}
{{- define "edgegpu.plugin.enabledVariants" -}}
{{- if include "edgegpu.dra.allNodes" . -}}
[]
{{- else -}}
{{- include "edgegpu.gpuVariants" . -}}
{{- end -}}
{{- end -}}

{{/* The DRA driver variants that are rendered, as a list (none without dra.enabled). */}}
{{- define "edgegpu.dra.variants" -}}
{{- if include "edgegpu.dra.enabled" . -}}
{{- include "edgegpu.gpuVariants" . -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/*
The node label that moves a GPU node from the device plugin to the DRA driver (docs/dra.md):
edgegpu.io/allocator=dra. The chart owns the key: validate.yaml refuses it in the values'
node selection.
*/}}
{{- define "edgegpu.allocatorKey" -}}edgegpu.io/allocator{{- end -}}

{{/*
An affinity (YAML text) with one requirement added to each of its required node selector
terms, as YAML: dict "affinity" <text> "requirement" <dict>.
*/}}
{{- define "edgegpu.affinityWith" -}}
{{- $affinity := .affinity | fromYaml -}}
{{- $required := dig "nodeAffinity" "requiredDuringSchedulingIgnoredDuringExecution" dict $affinity -}}
{{- $terms := list -}}
{{- range $term := $required.nodeSelectorTerms | default list -}}
{{- $term = deepCopy $term -}}
{{- $_ := set $term "matchExpressions" (append ($term.matchExpressions | default list) $.requirement) -}}
{{- $terms = append $terms $term -}}
{{- end -}}
{{- if not $terms -}}
{{- /* An affinity without required terms (podAntiAffinity only): one term of its own. */ -}}
{{- $terms = list (dict "matchExpressions" (list .requirement)) -}}
{{- end -}}
{{- $nodeAffinity := get $affinity "nodeAffinity" | default dict -}}
{{- $_ := set $nodeAffinity "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" $terms) -}}
{{- $_ := set $affinity "nodeAffinity" $nodeAffinity -}}
{{- toYaml $affinity -}}
{{- end -}}

{{/*
The affinity a plugin DaemonSet gets: its kind of GPU node (edgegpu.plugin.gpuAffinity), and
with dra.enabled only nodes not labelled edgegpu.io/allocator=dra. dict "root" $ "variant" v.
*/}}
{{- define "edgegpu.plugin.affinity" -}}
{{- $gpu := include "edgegpu.plugin.gpuAffinity" . -}}
{{- if include "edgegpu.dra.enabled" .root -}}
{{- include "edgegpu.affinityWith" (dict "affinity" $gpu "requirement" (dict "key" (include "edgegpu.allocatorKey" .root) "operator" "NotIn" "values" (list "dra"))) -}}
{{- else -}}
{{- $gpu -}}
{{- end -}}
{{- end -}}

{{/*
The affinity a DRA driver DaemonSet gets: the plugin's kind of GPU node, and unless
dra.allNodes only nodes labelled edgegpu.io/allocator=dra. dict "root" $ "variant" v.
*/}}
{{- define "edgegpu.dra.affinity" -}}
{{- $gpu := include "edgegpu.plugin.gpuAffinity" . -}}
{{- if include "edgegpu.dra.allNodes" .root -}}
{{- $gpu -}}
{{- else -}}
{{- include "edgegpu.affinityWith" (dict "affinity" $gpu "requirement" (dict "key" (include "edgegpu.allocatorKey" .root) "operator" "In" "values" (list "dra"))) -}}
{{- end -}}
{{- end -}}

{{/* Name of the DRA driver's ServiceAccount, ClusterRole(Binding) and admission policy. */}}
{{- define "edgegpu.dra.name" -}}
{{- printf "%s-dra-driver" (include "edgegpu.fullname" .) -}}
{{- end -}}

{{/* The DRA driver's name: ResourceSlice spec.driver, the attribute domain, the sockets. */}}
{{- define "edgegpu.dra.driverName" -}}edgegpu.io{{- end -}}

{{/* Name of the ConfigMap a plugin DaemonSet reads its optional config from. */}}
{{- define "edgegpu.plugin.configMapName" -}}
{{- printf "%s-device-plugin-%s-config" (include "edgegpu.fullname" .root) .variant -}}
{{- end -}}

{{/*
The config.map entry a plugin DaemonSet uses ("" when config.map is empty or none fits): its
own choice, else config.default, else, as NVIDIA's config.fallbackStrategies say (both when
unset), the entry named "default" (named) or the only entry (single). Whether the name exists
is checked in validate.yaml.
*/}}
{{- define "edgegpu.plugin.configEntry" -}}
{{- $map := .root.Values.config.map -}}
{{- $name := (index .root.Values.devicePlugin .variant).config | default .root.Values.config.default -}}
{{- $fallbacks := .root.Values.config.fallbackStrategies -}}
{{- if kindIs "invalid" $fallbacks -}}
{{- $fallbacks = list "named" "single" -}}
{{- end -}}
{{- if and $map (not $name) -}}
{{- if and (has "named" $fallbacks) (hasKey $map "default") -}}
{{- $name = "default" -}}
{{- else if and (has "single" $fallbacks) (eq (len $map) 1) -}}
{{- $name = keys $map | first -}}
{{- end -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/*
A mapping of a config entry with its keys lowercased, as JSON: the plugin, like NVIDIA's reader,
matches the keys of the top level, flags and sharing in any case.
*/}}
{{- define "edgegpu.config.lowerKeys" -}}
{{- $out := dict -}}
{{- range $key, $value := . -}}
{{- $_ := set $out (lower $key) $value -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Plugin flags set through values, as env entries (nothing for a null value). */}}
{{- define "edgegpu.plugin.flagEnv" -}}
{{- if .Values.migStrategy }}
- name: MIG_STRATEGY
  value: {{ .Values.migStrategy | quote }}
{{- end }}
{{- if typeIs "bool" .Values.failOnInitError }}
- name: FAIL_ON_INIT_ERROR
  value: {{ .Values.failOnInitError | quote }}
{{- end }}
{{- if .Values.deviceListStrategy }}
- name: DEVICE_LIST_STRATEGY
  value: {{ .Values.deviceListStrategy | quote }}
{{- end }}
{{- if .Values.deviceIDStrategy }}
- name: DEVICE_ID_STRATEGY
  value: {{ .Values.deviceIDStrategy | quote }}
{{- end }}
{{- if typeIs "bool" .Values.compatWithCPUManager }}
- name: PASS_DEVICE_SPECS
  value: {{ .Values.compatWithCPUManager | quote }}
{{- end }}
{{- end -}}

{{/*
The variables the chart itself sets in a plugin container (any value set), as a JSON list:
devicePlugin.containers.main.env may not set them (validate.yaml); CI checks the list covers
every variable a rendering gives the container.
*/}}
{{- define "edgegpu.plugin.chartEnvNames" -}}
{{- list "DEVICE_DISCOVERY_STRATEGY" "NVIDIA_VISIBLE_DEVICES" "NVIDIA_DRIVER_CAPABILITIES" "MIG_STRATEGY" "FAIL_ON_INIT_ERROR" "DEVICE_LIST_STRATEGY" "DEVICE_ID_STRATEGY" "PASS_DEVICE_SPECS" "NODE_NAME" "METRICS_BIND_ADDRESS" "POD_RESOURCES_SOCKET" "FEATURE_FILE" "MPS_ROOT" "CONFIG_FILE" | toJson -}}
{{- end -}}

{{/* Name of the node labeller's ServiceAccount, ClusterRole and DaemonSet. */}}
{{- define "edgegpu.labeller.name" -}}
{{- printf "%s-node-labeller" (include "edgegpu.fullname" .) -}}
{{- end -}}

{{/*
The service-account token of the labeller, as a projected volume: mounted only into the
container that runs edgegpu-labeller (automountServiceAccountToken stays false for the pod, so
the device plugin itself never holds a token). kube-root-ca.crt is in every namespace (1.20+).
*/}}
{{- define "edgegpu.labeller.tokenVolume" -}}
- name: labeller-token
  projected:
    sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3607}
      - configMap:
          name: kube-root-ca.crt
          items:
            - {key: ca.crt, path: ca.crt}
{{- end -}}

{{/* Where edgegpu-labeller looks for the token and CA (its defaults). */}}
{{- define "edgegpu.labeller.tokenMount" -}}
- {name: labeller-token, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
{{- end -}}

{{/* NODE_NAME from the downward API (the labeller's node; the metrics' Hostname label). */}}
{{- define "edgegpu.nodeNameEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef: {fieldPath: spec.nodeName}
{{- end -}}

{{/* The restricted security context every non-privileged container of the chart gets. */}}
{{- define "edgegpu.restrictedSecurityContext" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The discovery environment a plugin variant and its labeller share. dict "root" $ "variant" v. */}}
{{- define "edgegpu.plugin.discoveryEnv" -}}
- name: DEVICE_DISCOVERY_STRATEGY
  value: {{ if eq .variant "jetson" }}tegra{{ else }}nvml{{ end }}
{{- if eq .variant "discrete" }}
# Ask the NVIDIA runtime for libnvidia-ml.so.1 and the GPU device nodes (NVML needs
# them open); "utility" is the NVML-only capability, no CUDA libraries.
- name: NVIDIA_VISIBLE_DEVICES
  value: all
- name: NVIDIA_DRIVER_CAPABILITIES
  value: utility
{{- end }}
{{- with include "edgegpu.plugin.flagEnv" .root | trim }}
{{ . }}
{{- end }}
{{- end -}}

{{/*
"true" when the plugins read per-pod GPU memory (metrics.podGpuMemory.enabled, which needs the
metrics and their pod attribution; podGpuMemory may be null in hand-written values), else "".
*/}}
{{- define "edgegpu.podGpuMemory" -}}
{{- $metrics := .Values.metrics -}}
{{- if and $metrics.enabled $metrics.podAttribution (dig "podGpuMemory" "enabled" false $metrics) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the Jetson plugin mounts nvmap's debugfs directory (per-pod GPU memory on nvgpu). */}}
{{- define "edgegpu.podGpuMemory.nvmap" -}}
{{- if and (include "edgegpu.podGpuMemory" .) (dig "podGpuMemory" "nvmapDebugfs" false .Values.metrics) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the discrete plugin runs in the host's PID namespace (per-pod GPU memory from NVML). */}}
{{- define "edgegpu.podGpuMemory.hostPID" -}}
{{- if and (include "edgegpu.podGpuMemory" .) (dig "podGpuMemory" "hostPID" false .Values.metrics) -}}true{{- end -}}
{{- end -}}

{{/*
The read-only host files a plugin variant's discovery, health checks and sensors read (under
--root /host), for the plugin container or its labeller. dict "root" $ "variant" v "plugin"
bool: the labeller (plugin false) gets /proc/meminfo alone, never the host's whole /proc.
*/}}
{{- define "edgegpu.plugin.hostFileMounts" -}}
{{- $hostProc := and .plugin (include "edgegpu.podGpuMemory" .root) -}}
{{- if eq .variant "jetson" -}}
{{- if $hostProc -}}
# Detection signals (docs/device-plugin.md); the plugin reads the device tree
# here: the host's /proc below hides the image's /host/proc/device-tree link.
{{- else -}}
# Detection signals (docs/device-plugin.md); /host/proc/device-tree is a
# symlink in the image to /host/sys/firmware/devicetree/base, as on the host.
{{- end }}
- {name: host-devicetree, mountPath: /host/sys/firmware/devicetree/base, readOnly: true}
- {name: host-sys-devices, mountPath: /host/sys/devices, readOnly: true}
- {name: host-sys-class, mountPath: /host/sys/class, readOnly: true}
- {name: host-sys-module, mountPath: /host/sys/module, readOnly: true}
# Power rails (docs/metrics.md).
- {name: host-sys-bus, mountPath: /host/sys/bus, readOnly: true}
{{- if not $hostProc }}
- {name: host-proc-meminfo, mountPath: /host/proc/meminfo, readOnly: true}
{{- end }}
- {name: host-nv-tegra-release, mountPath: /host/etc/nv_tegra_release, readOnly: true}
{{- else -}}
# A GPU's NUMA node when NVML cannot tell (older drivers): /sys/bus/pci/devices/*
# are links into /sys/devices.
- {name: host-sys-bus, mountPath: /host/sys/bus, readOnly: true}
- {name: host-sys-devices, mountPath: /host/sys/devices, readOnly: true}
{{- end }}
{{- if $hostProc }}
# The host's /proc: each GPU process's /proc/<pid>/cgroup names its pod (per-pod
{{- if eq .variant "jetson" }}
# GPU memory); MemTotal and NvMapMemUsed in /proc/meminfo.
{{- else }}
# GPU memory); the driver's MIG minors (--pass-device-specs).
{{- end }}
- {name: host-proc, mountPath: /host/proc, readOnly: true}
{{- end }}
{{- if and .plugin (include "edgegpu.podGpuMemory.nvmap" .root) (eq .variant "jetson") }}
# nvmap's per-process GPU memory (debugfs; metrics.podGpuMemory.nvmapDebugfs).
- {name: host-nvmap-iovmm, mountPath: /host/sys/kernel/debug/nvmap/iovmm, readOnly: true}
{{- end }}
{{- end -}}

{{/*
Every GPU node the chart serves, whichever allocator runs there (plugin or DRA driver), as an
affinity (YAML): the kinds' GPU node selector terms, ORed; {} when none. Node setup and the MPS
companion run there.
*/}}
{{- define "edgegpu.gpuNodes.anyAffinity" -}}
{{- $terms := list -}}
{{- range $variant := include "edgegpu.gpuVariants" . | fromJsonArray -}}
{{- $affinity := include "edgegpu.plugin.gpuAffinity" (dict "root" $ "variant" $variant) | fromYaml -}}
{{- $terms = concat $terms (dig "nodeAffinity" "requiredDuringSchedulingIgnoredDuringExecution" "nodeSelectorTerms" (list) $affinity) -}}
{{- end -}}
{{- if $terms -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      {{- toYaml $terms | nindent 6 }}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/* "true" when the MPS companion is enabled (mps may be null in NVIDIA-shaped values), else "". */}}
{{- define "edgegpu.mps.enabled" -}}
{{- if dig "mps" "enabled" false .Values.AsMap -}}true{{- end -}}
{{- end -}}

{{/* The host directory of the MPS files (mps.root; null: the default). */}}
{{- define "edgegpu.mps.root" -}}
{{- dig "mps" "root" "" .Values.AsMap | default "/run/edgegpu/mps" -}}
{{- end -}}
