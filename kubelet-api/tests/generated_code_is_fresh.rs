//! Regenerates the gRPC code from `proto/` with a pure-Rust protobuf compiler and
//! compares it with the checked-in copy, so a proto edit without regeneration fails CI.
//! With `EDGEGPU_REGEN_PROTO=1` it rewrites `src/generated/` instead.

use std::path::Path;

fn generate(out_dir: &Path) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let protos = [
        "proto/v1beta1.proto",
        "proto/pluginregistration.proto",
        "proto/podresources.proto",
        "proto/dra-v1.proto",
        "proto/dra-v1beta1.proto",
        "proto/dra-health-v1alpha1.proto",
    ];
    let fds = protox::compile(protos.map(|p| manifest.join(p)), [manifest.join("proto")])
        .expect("proto files compile");
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(out_dir)
        .compile_fds(fds)
        .expect("code generation succeeds");
    // The CRI (runtime.v1), client only: the end-to-end test (e2e/) drives containerd with it
    // as the kubelet does; nothing shipped serves or calls it (feature `cri`).
    let fds = protox::compile(
        [manifest.join("proto/cri-api.proto")],
        [manifest.join("proto")],
    )
    .expect("the CRI proto compiles");
    tonic_build::configure()
        .build_client(true)
        .build_server(false)
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(out_dir)
        .compile_fds(fds)
        .expect("CRI code generation succeeds");
}

#[test]
fn generated_code_matches_protos() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checked_in = manifest.join("src/generated");
    let fresh = tempfile::tempdir().unwrap();
    generate(fresh.path());
    for name in [
        "v1beta1.rs",
        "pluginregistration.rs",
        "v1.rs",
        "runtime.v1.rs",
        "k8s.io.kubelet.pkg.apis.dra.v1.rs",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.rs",
        "v1alpha1.rs",
    ] {
        let new = std::fs::read_to_string(fresh.path().join(name)).unwrap();
        if std::env::var_os("EDGEGPU_REGEN_PROTO").is_some() {
            std::fs::write(checked_in.join(name), &new).unwrap();
            continue;
        }
        let old = std::fs::read_to_string(checked_in.join(name)).unwrap_or_default();
        assert!(
            old == new,
            "kubelet-api/src/generated/{name} is stale: run scripts/regen-proto.sh"
        );
    }
}
