//! containerd's TOML configuration: the system containerd's config.toml (and the files it
//! imports) and k3s's `config*.toml.tmpl` templates. Read into a [`Description`] (what the
//! file decides about runtimes and CDI, with lines) and edited with `toml_edit` so that
//! comments, key order and formatting stay.
//!
//! One file per job: [`version`] (config versions and the CRI plugin's names),
//! `template` (Go-template lines stood in for while the TOML is parsed, restored byte for
//! byte, and the checks that an edit never lands inside `{{ if }}`/`{{ range }}`/...),
//! `toml` (parsing, and tables and values addressed by a path of keys), `describe`,
//! `edit` (the runtime) and `edit_cdi`; `cdi` reads the CDI settings, `copy` what a new
//! runtime copies, `node` a table tree with where each value comes from.

mod cdi;
mod copy;
mod describe;
mod edit;
mod edit_cdi;
mod node;
mod template;
mod toml;
pub mod version;

pub use cdi::Setting;
pub use copy::{copy_from_plugin, legacy_default_type, runtime_copy, RuntimeCopy};
pub use describe::{describe, describe_as, Declared, DefaultRuntime, Description};
pub use edit::{edit, CopyFrom, Want};
pub use edit_cdi::{edit_cdi, CdiWant};
pub use node::Node;
pub use version::{version_of_cri_plugin, Flavor, CRI_V1, CRI_V2, CRI_V3};
