#!/usr/bin/env bash
# Regenerates kubelet-api/src/generated/ from kubelet-api/proto/ (pure Rust: protox + tonic-build, no protoc).
set -euo pipefail
cd "$(dirname "$0")/.."
EDGEGPU_REGEN_PROTO=1 cargo test -p edgegpu-kubelet-api --test generated_code_is_fresh
