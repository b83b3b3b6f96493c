#!/usr/bin/env bash
# Regenerates the manifests derived from the Helm chart (deploy/generate.py says which), with
# the pinned helm (scripts/install-helm.sh) and the manifest checks' Python (PyYAML).
# Usage: deploy/generate.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
helm=$(scripts/install-helm.sh)
python=.tools/venv-manifests/bin/python
[ -x "$python" ] || python=python3
exec "$python" deploy/generate.py --helm "$helm" "$@"
