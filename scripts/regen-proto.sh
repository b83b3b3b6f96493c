#!/usr/bin/env bash
# Regenerates kubelet-api/src/generated/ from kubelet-api/proto/ (pure Rust: protox + tonic-build, no protoc):
# the device-plugin, plugin-watcher, pod-resources, DRA (v1, v1beta1, health v1alpha1) and CRI APIs; the
# list of protos and generated files is in kubelet-api/tests/generated_code_is_fresh.rs.
# Usage: scripts/regen-proto.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/args.sh
script_args "$0" "" "$@"
EDGEGPU_REGEN_PROTO=1 cargo test -p edgegpu-kubelet-api --test generated_code_is_fresh
