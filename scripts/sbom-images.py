#!/usr/bin/env python3
"""Writes a CycloneDX 1.5 JSON SBOM per container image and platform into DIST_DIR/sbom/ and
validates every SBOM there (those of the binaries from cargo-cyclonedx too) against CycloneDX's
JSON schema, with cyclonedx-python-lib (OWASP CycloneDX's Python library).

The images (scripts/build-images.sh) hold one or two of our binaries plus files of Debian
packages unpacked without dpkg, so no scanner can find those packages in them: they are taken
from DIST_DIR/images/debian-packages.txt (package, arch, version, written by build-images.sh)
with the set each image takes (deploy/image/assemble-rootfs.sh): libc6 and libgcc-s1 for the
dynamic programs, busybox-static for edgegpu-node-setup. Each binary is a component with its
sha256 and a reference to its own SBOM (<binary>-<triple>.cdx.json, its crates).

Usage: scripts/sbom-images.py DIST_DIR VERSION ARCH...
"""
import datetime
import hashlib
import json
import os
import sys
import uuid
from pathlib import Path

from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, XsUri
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot5
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

GNU = {"amd64": "x86_64-unknown-linux-gnu", "arm64": "aarch64-unknown-linux-gnu"}
MUSL = {"amd64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}
# image -> (binaries with their crate, Debian packages), as deploy/image/assemble-rootfs.sh builds it
IMAGES = {
    # One multi-call binary: the device plugin, the DRA driver and the labeller.
    "edgegpu-device-plugin": ([("edgegpu", "edgegpu")],
                              ["libc6", "libgcc-s1"]),
    "devicequery": ([("devicequery", "edgegpu-devicequery")], ["libc6", "libgcc-s1"]),
    "edgegpu-node-setup": ([("edgegpu-node-setup", "edgegpu-node-setup")], ["busybox-static"]),
}
REGISTRY = "ghcr.io/edgegpu"


def main(argv):
    if len(argv) < 4 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    dist, version, arches = Path(argv[1]), argv[2], argv[3:]
    debian = {}
    for line in (dist / "images" / "debian-packages.txt").read_text().splitlines():
        package, arch, deb_version = line.split()
        debian[(package, arch)] = deb_version
    out = dist / "sbom"
    for arch in arches:
        for image, (binaries, packages) in IMAGES.items():
            # Reproducible: the serial number is derived from what the SBOM describes, the
            # timestamp is SOURCE_DATE_EPOCH when set.
            bom = Bom(serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"{REGISTRY}/{image}:{version}/linux/{arch}"))
            if "SOURCE_DATE_EPOCH" in os.environ:
                bom.metadata.timestamp = datetime.datetime.fromtimestamp(
                    int(os.environ["SOURCE_DATE_EPOCH"]), tz=datetime.timezone.utc)
            bom.metadata.component = Component(
                type=ComponentType.CONTAINER, name=f"{REGISTRY}/{image}", version=version,
                bom_ref=f"{REGISTRY}/{image}:{version}@linux/{arch}",
                purl=PackageURL("oci", None, image, version,
                                {"repository_url": f"{REGISTRY}/{image}", "arch": arch}))
            for binary, crate in binaries:
                triple = MUSL[arch] if binary == "edgegpu-node-setup" else GNU[arch]
                data = (dist / f"{binary}-{triple}").read_bytes()
                sbom = f"{binary}-{triple}.cdx.json"
                if not (out / sbom).is_file():
                    sys.exit(f"missing {out / sbom} (cargo-cyclonedx)")
                bom.components.add(Component(
                    type=ComponentType.APPLICATION, name=binary, version=version,
                    bom_ref=f"{binary}@{version}/{triple}",
                    purl=PackageURL("cargo", None, crate, version),
                    hashes=[HashType(alg=HashAlgorithm.SHA_256, content=hashlib.sha256(data).hexdigest())],
                    external_references=[ExternalReference(type=ExternalReferenceType.BOM, url=XsUri(sbom))]))
            for package in packages:
                deb_version = debian[(package, arch)]
                bom.components.add(Component(
                    type=ComponentType.LIBRARY if package.startswith("lib") else ComponentType.APPLICATION,
                    name=package, version=deb_version, bom_ref=f"{package}@{deb_version}/{arch}",
                    purl=PackageURL("deb", "debian", package, deb_version, {"arch": arch, "distro": "trixie"})))
            # The image consists of exactly these components: the root depends on each.
            bom.register_dependency(bom.metadata.component, list(bom.components))
            (out / f"{image}-linux-{arch}.cdx.json").write_text(JsonV1Dot5(bom).output_as_string(indent=2) + "\n")

    validator = JsonStrictValidator(SchemaVersion.V1_5)
    bad = 0
    for path in sorted(out.glob("*.cdx.json")):
        text = path.read_text()
        error = validator.validate_str(text)
        if error is not None:
            print(f"FAIL: {path} is not valid CycloneDX 1.5: {error}", file=sys.stderr)
            bad += 1
            continue
        components = json.loads(text).get("components", [])
        if not components:
            print(f"FAIL: {path} lists no component", file=sys.stderr)
            bad += 1
            continue
        print(f"   {path.name}: valid CycloneDX 1.5, {len(components)} components")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
