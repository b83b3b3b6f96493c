{{/*
The spec of a devicequery test Job (the `helm test` Jobs and their static copies in
deploy/devicequery/): dict "root" $ "select" <labels> "args" <list> "argsComment" <text or "">
"resource" <name> "count" <n> "memoryLimit" <bool: 256Mi>.
*/}}
{{- define "edgegpu.devicequery.jobSpec" -}}
{{- $root := .root -}}
# One verdict: a retry would hide a flaky node.
backoffLimit: 0
activeDeadlineSeconds: 300
ttlSecondsAfterFinished: 3600
template:
  metadata:
    labels:
      {{- include "edgegpu.podLabels" .select | nindent 6 }}
  spec:
    restartPolicy: Never
    {{- with $root.Values.devicequery.runtimeClassName }}
    # Selects the NVIDIA container runtime, which injects libcuda.so.1 and the GPU device
    # nodes. Drop this line where nvidia is already the node's DEFAULT runtime (e.g. k3s set up
    # by `edgegpu-node-setup` in default-runtime mode, or `nvidia-ctk runtime configure
    # --set-as-default`), or on clusters without the RuntimeClass object (deploy/runtimeclass.yaml):
    # a pod naming a RuntimeClass that does not exist is rejected. Without the NVIDIA runtime
    # the log ends with `cudaGetDeviceCount returned 35` ... `Result = FAIL`.
    runtimeClassName: {{ . }}
    {{- end }}
    automountServiceAccountToken: false
    enableServiceLinks: false
    {{- with $root.Values.imagePullSecrets }}
    imagePullSecrets:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    securityContext:
      runAsNonRoot: true
      runAsUser: 65532
      runAsGroup: 65532
      # gid 44 = "video" on L4T/Ubuntu: owns the Jetson GPU nodes (/dev/nvhost-*, /dev/nvmap,
      # mode 0660). Harmless on discrete-GPU nodes, whose /dev/nvidia* are world-accessible.
      supplementalGroups: [44]
      seccompProfile:
        type: RuntimeDefault
    {{- $tolerations := $root.Values.devicequery.tolerations }}
    {{- /* The GPU nodes' taints: the plugins' tolerations unless devicequery has its own. */}}
    {{- with ternary $root.Values.tolerations $tolerations (kindIs "invalid" $tolerations) }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    containers:
      - name: devicequery
        image: {{ include "edgegpu.image" (dict "root" $root "image" $root.Values.devicequery.image) }}
        imagePullPolicy: {{ $root.Values.devicequery.image.pullPolicy }}
        {{- with .argsComment }}
        # {{ . }}
        {{- end }}
        args: [{{ range $i, $a := .args }}{{ if $i }}, {{ end }}{{ $a | quote }}{{ end }}]
        resources:
          requests:
            cpu: 10m
            memory: 64Mi
          limits:
            {{ .resource }}: {{ .count }}
            {{- if .memoryLimit }}
            # cuInit maps the driver's state; generous until measured on real nodes.
            memory: 256Mi
            {{- else }}
            # No memory limit: on a Jetson the GPU memory it allocates is the system's, and
            # whether nvmap charges it to the pod's memory cgroup is not verified
            # (docs/sharing.md); a limit below the probe's would end it OOMKilled, no verdict.
            {{- end }}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities:
            drop: ["ALL"]
{{- end -}}
