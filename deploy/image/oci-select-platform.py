#!/usr/bin/env python3
"""Writes a copy of an OCI layout archive (scripts/build-images.sh's multi-arch
<image>.oci.tar) that holds one platform only: index.json still names one image index, with the
same annotations (io.containerd.image.name, org.opencontainers.image.ref.name), now listing
only that platform's manifest; only the blobs that manifest reaches (config, layers) are kept.
The platform's manifest, config and layers are the same bytes, so its manifest digest is the
one the multi-arch index lists. Deterministic: entries sorted, fixed owner and mtime (the
source archive's index.json mtime, i.e. SOURCE_DATE_EPOCH of the build).

Usage: deploy/image/oci-select-platform.py IN.oci.tar ARCH OUT.oci.tar   (ARCH: amd64, arm64)
Prints the kept manifest digest. Fails unless the index lists exactly one manifest for
linux/ARCH.
"""
import hashlib
import io
import json
import sys
import tarfile

INDEX = "application/vnd.oci.image.index.v1+json"


def main(argv):
    if len(argv) != 4 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    src, arch, dst = argv[1:]
    with tarfile.open(src) as tar:
        files = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar if m.isfile()}
        mtime = tar.getmember("index.json").mtime

    def blob(digest):
        return files["blobs/" + digest.replace(":", "/", 1)]

    top = json.loads(files["index.json"])
    if len(top["manifests"]) != 1 or top["manifests"][0]["mediaType"] != INDEX:
        sys.exit(f"{src}: index.json must name one image index")
    entry = top["manifests"][0]
    index = json.loads(blob(entry["digest"]))
    chosen = [m for m in index["manifests"] if m.get("platform", {}).get("os") == "linux"
              and m["platform"].get("architecture") == arch]
    if len(chosen) != 1:
        sys.exit(f"{src}: {len(chosen)} manifests for linux/{arch}, want 1")
    manifest = json.loads(blob(chosen[0]["digest"]))

    new_index = dict(index, manifests=chosen)
    index_bytes = json.dumps(new_index, separators=(",", ":")).encode()
    index_digest = "sha256:" + hashlib.sha256(index_bytes).hexdigest()
    new_top = dict(top, manifests=[dict(entry, digest=index_digest, size=len(index_bytes))])

    out = {
        "oci-layout": files["oci-layout"],
        "index.json": json.dumps(new_top, separators=(",", ":")).encode(),
        "blobs/" + index_digest.replace(":", "/", 1): index_bytes,
    }
    for digest in [chosen[0]["digest"], manifest["config"]["digest"]] + [
            layer["digest"] for layer in manifest["layers"]]:
        data = blob(digest)
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            sys.exit(f"{src}: blob {digest} does not match its digest")
        out["blobs/" + digest.replace(":", "/", 1)] = data

    with tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({"/".join(name.split("/")[:i]) + "/" for name in out
                       for i in range(1, name.count("/") + 1)})
        for name in sorted(dirs + list(out)):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
            if name.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(out[name]), 0o644
                tar.addfile(info, io.BytesIO(out[name]))
    print(chosen[0]["digest"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
