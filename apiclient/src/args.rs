//! The command-line flags every node agent that talks to the API server takes (the DRA
//! driver, the labeller), as one clap group to `#[command(flatten)]`: which Node this is, and
//! how to reach the API server and prove who we are.

use std::path::PathBuf;

use crate::{in_cluster_url, ApiServer};

/// Which Node this program acts for, and the API server it asks.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiArgs {
    /// This node's name (the DaemonSets pass spec.nodeName through the downward API): the Node
    /// the labeller labels, the pool the DRA driver publishes.
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: String,

    /// The API server [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT].
    #[arg(long, env = "API_SERVER", value_name = "URL")]
    pub api_server: Option<String>,

    /// The bearer token.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    pub token_file: PathBuf,

    /// The CA bundle (PEM) the API server's certificate chains to.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )]
    pub ca_file: PathBuf,
}

impl ApiArgs {
    /// Refuses a node name that is not a DNS subdomain: it is part of URL paths and, for the
    /// DRA driver, a pool name, so a wrong one would only fail later and less clearly.
    pub fn check_node_name(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            is_dns_subdomain(&self.node_name),
            "--node-name / NODE_NAME `{}` is not a node name (a DNS subdomain: lower-case \
             letters, digits, '-' and '.'; set it from spec.nodeName)",
            self.node_name
        );
        Ok(())
    }

    /// `--api-server`, else the in-cluster API server.
    pub fn url(&self) -> anyhow::Result<String> {
        match &self.api_server {
            Some(url) => Ok(url.clone()),
            None => in_cluster_url().ok_or_else(|| {
                anyhow::anyhow!(
                    "KUBERNETES_SERVICE_HOST is not set: not in a pod? use --api-server"
                )
            }),
        }
    }

    /// The API server with the token and CA of these flags, read on the blocking pool (the
    /// files are read again on each call: a rotated token is picked up). `forbidden_hint`
    /// says which role must allow what, for a 403 answer.
    pub async fn connect(&self, forbidden_hint: &str) -> anyhow::Result<ApiServer> {
        let url = self.url()?;
        let (token, ca, hint) = (
            self.token_file.clone(),
            self.ca_file.clone(),
            forbidden_hint.to_string(),
        );
        tokio::task::spawn_blocking(move || {
            ApiServer::new(&url, &token, &ca).map(|api| api.with_forbidden_hint(hint))
        })
        .await?
    }
}

/// RFC 1123 subdomain, as Kubernetes' `NameIsDNSSubdomain` checks it (a Node's name is one).
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SERVICE_ACCOUNT_DIR;
    use clap::Parser;

    /// The table the node library's resource-name check passes too.
    #[test]
    fn node_names_are_dns_subdomains() {
        for (name, valid) in edgegpu_testkit::names::DNS_SUBDOMAIN_CASES {
            assert_eq!(is_dns_subdomain(name), *valid, "{name:?}");
        }
        let (longest, too_long) = edgegpu_testkit::names::longest_and_too_long();
        assert!(is_dns_subdomain(&longest));
        assert!(!is_dns_subdomain(&too_long));
    }

    #[derive(Parser)]
    struct Program {
        #[command(flatten)]
        api: ApiArgs,
    }

    #[test]
    fn flags_defaults_and_the_node_name_check() {
        let p = Program::try_parse_from(["x", "--node-name", "orin-01"]).unwrap();
        assert_eq!(p.api.node_name, "orin-01");
        assert_eq!(
            p.api.token_file,
            PathBuf::from(SERVICE_ACCOUNT_DIR).join("token")
        );
        assert_eq!(
            p.api.ca_file,
            PathBuf::from(SERVICE_ACCOUNT_DIR).join("ca.crt")
        );
        p.api.check_node_name().unwrap();
        let p = Program::try_parse_from(["x", "--node-name", "Orin_01"]).unwrap();
        let e = p.api.check_node_name().unwrap_err().to_string();
        assert!(e.contains("`Orin_01` is not a node name"), "{e}");
        let p = Program::try_parse_from(["x", "--node-name", "n", "--api-server", "https://h:1"])
            .unwrap();
        assert_eq!(p.api.url().unwrap(), "https://h:1");
    }
}
