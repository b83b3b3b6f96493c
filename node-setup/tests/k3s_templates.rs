//! What node-setup knows about k3s's templates, checked against Go's text/template: every
//! table the (stand-in) base templates emit is one node-setup refuses to see declared
//! again after the base line, and the template lexer accepts exactly what Go accepts.

use crate::common;

use std::path::Path;

use common::{k3s_data_json, render_k3s_template_json, K3sData};
use edgegpu_node_setup::formats::containerd::{describe, Flavor};
use edgegpu_node_setup::formats::go_template;

/// The data variants that make the base emit each of its conditional tables.
fn data_variants() -> Vec<serde_json::Value> {
    let plain = k3s_data_json(&K3sData {
        default_runtime: Some("nvidia"),
        ..K3sData::default()
    });
    let mut everything = plain.clone();
    everything["DisableCgroup"] = true.into();
    everything["IsRunningInUserNS"] = true.into();
    everything["NodeConfig"]["AgentConfig"]["Snapshotter"] = "stargz".into();
    everything["NodeConfig"]["AgentConfig"]["ImageServiceSocket"] = "/run/stargz.sock".into();
    everything["NodeConfig"]["Containerd"]["BlockIOConfig"] = "/etc/blockio.yaml".into();
    everything["NodeConfig"]["Containerd"]["RDTConfig"] = "/etc/rdt.yaml".into();
    everything["PrivateRegistryConfig"] = serde_json::json!({
        "Mirrors": {"docker.io": {"Endpoints": ["https://mirror.local"], "Rewrites": {"^library/(.*)": "mirror/$1"}}},
        "Configs": {"registry.local:5000": {"Auth": {"Username": "u"}, "TLS": {"CAFile": "/etc/ca.pem"}}}
    });
    let mut nix = plain.clone();
    nix["NodeConfig"]["AgentConfig"]["Snapshotter"] = "nix".into();
    nix["NodeConfig"]["AgentConfig"]["ImageServiceSocket"] = "/run/nix.sock".into();
    vec![plain, everything, nix]
}

#[test]
fn every_table_the_base_emits_is_known_as_emitted_by_the_base() {
    let detected = "runtimes.\"nvidia\"";
    for version in [2, 3] {
        let mut headers: Vec<String> = Vec::new();
        for data in data_variants() {
            let Some(rendered) =
                render_k3s_template_json("{{ template \"base\" . }}\n", version, &data)
            else {
                return;
            };
            let rendered = rendered.unwrap();
            for line in rendered.lines().map(str::trim) {
                let is_header = line.starts_with('[') && !line.starts_with("[[");
                // Runtimes k3s finds on its PATH: node-setup's own check (it knows the
                // binaries), not the base's fixed tables.
                let detected_runtime = line.replace('\'', "\"").contains(detected);
                if is_header && !detected_runtime && !headers.iter().any(|h| h == line) {
                    headers.push(line.to_string());
                }
            }
        }
        assert!(headers.len() >= 20, "v{version}: {headers:?}");
        let flavor = Flavor::K3sTemplate { version };
        for header in &headers {
            let template = format!("{{{{ template \"base\" . }}}}\n{header}\n  x = 1\n");
            let d = describe(Path::new("config.toml.tmpl"), Some(&template), flavor).unwrap();
            assert!(
                d.redeclares_base_table.is_some(),
                "v{version}: the base emits {header}, node-setup does not know it"
            );
        }
        eprintln!(
            "v{version}: {} tables the base emits, all known",
            headers.len()
        );
    }
    // A new table is not one of them.
    for (version, header) in [
        (
            3,
            "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpu]",
        ),
        (
            2,
            "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu.options]",
        ),
        (
            3,
            "[plugins.'io.containerd.grpc.v1.cri'.x509_key_pair_streaming]",
        ),
    ] {
        let template = format!("{{{{ template \"base\" . }}}}\n{header}\n  x = 1\n");
        let d = describe(
            Path::new("config.toml.tmpl"),
            Some(&template),
            Flavor::K3sTemplate { version },
        )
        .unwrap();
        assert_eq!(d.redeclares_base_table, None, "{header}");
    }
}

#[test]
fn a_top_level_key_the_base_emits_is_a_duplicate() {
    // Keys before the base line share the top-level table with the base's own
    // `version = 3`.
    let template = "version = 3\n{{ template \"base\" . }}\n";
    let d = describe(
        Path::new("config-v3.toml.tmpl"),
        Some(template),
        Flavor::K3sTemplate { version: 3 },
    )
    .unwrap();
    assert_eq!(
        d.redeclares_base_table,
        Some((1, "version".to_string())),
        "{d:?}"
    );
    let Some(rendered) = render_k3s_template_json(template, 3, &k3s_data_json(&K3sData::default()))
    else {
        return;
    };
    let rendered = rendered.unwrap();
    for (release, good, dump) in common::containerd_dumps(&rendered) {
        assert!(
            !good,
            "containerd {release} refuses a key given twice:\n{dump}\n{rendered}"
        );
    }
}

#[test]
fn the_template_lexer_accepts_what_go_accepts() {
    let cases = [
        "{{/* c */}}\n",
        "{{- /* c */ -}}\n",
        "{{- /* c */}}\n",
        "{{/* c */ -}}\n",
        "{{ /* c */ }}\n",
        "{{-/* c */}}\n",
        "{{/* c */ }}\n",
        "{{/* c */-}}\n",
        "{{ \"}}\" }}\n",
        "{{ `}}` }}\n",
        "{{ if .SystemdCgroup }}a{{ end }}\n",
        "{{ if .SystemdCgroup }}a\n",
        "{{ end }}\n",
        "{{/* never closed\n",
        "{{ .Program\n",
        "{{- .Program -}}\n",
        "{{-.Program}}\n",
        "{{-3}}\n",
        "{{- 3 -}}\n",
    ];
    let data = k3s_data_json(&K3sData::default());
    let mut checked = 0;
    for text in cases {
        let ours = go_template::lines(text).is_ok();
        let Some(go) = render_k3s_template_json(text, 3, &data) else {
            return;
        };
        let go_ok = match &go {
            Ok(_) => true,
            Err(e) if e.contains("template:") && !e.contains("execute") => false,
            Err(e) => panic!("{text:?}: not a parse error: {e}"),
        };
        assert_eq!(ours, go_ok, "{text:?}: Go says {go:?}");
        checked += 1;
    }
    eprintln!("{checked} lexer cases agree with Go's text/template");
}
