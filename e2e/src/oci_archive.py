"""Writes a one-layer OCI image archive (OCI layout in a tar) named $3 holding the file $1 as
/pause, entrypoint /pause, to $2. Standard library only; deterministic (fixed mtimes)."""
import gzip, hashlib, io, json, sys, tarfile

src, out, name = sys.argv[1:4]

def blob(tar, data):
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return "sha256:" + digest, len(data)

layer_tar = io.BytesIO()
with tarfile.open(fileobj=layer_tar, mode="w", format=tarfile.PAX_FORMAT) as lt:
    data = open(src, "rb").read()
    info = tarfile.TarInfo("pause")
    info.size, info.mode = len(data), 0o755
    lt.addfile(info, io.BytesIO(data))
diff_id = "sha256:" + hashlib.sha256(layer_tar.getvalue()).hexdigest()
layer = gzip.compress(layer_tar.getvalue(), mtime=0)

with tarfile.open(out, "w") as tar:
    layer_digest, layer_size = blob(tar, layer)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    config_digest, config_size = blob(tar, config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}],
    }).encode()
    manifest_digest, manifest_size = blob(tar, manifest)
    for fname, data in [
        ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
        ("index.json", json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
            "size": manifest_size, "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]},
        }]}).encode()),
    ]:
        info = tarfile.TarInfo(fname)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
