//! What a node serves: the devices (whole GPUs or MIG devices, [`Unit`]), how they are
//! shared and limited, and each resource's health table ([`Served`]), planned once per round
//! from discovery and the config file ([`build`]). Which resources the node serves under each
//! MIG strategy is [`mig`]; time-slicing replicas and the preferred pick, [`sharing`]; the GPU
//! memory limit a container was given, [`limits`]; the `/dev` nodes a unit needs,
//! [`device_specs`]. The device plugin answers `Allocate` from it; the DRA driver follows its
//! health; the labels describe it.

pub mod build;
pub mod device_specs;
pub mod limits;
pub mod mig;
pub mod plan;
pub mod served;
pub mod sharing;
pub mod unit;

pub use build::{
    build_served, served_for_health, served_of, served_of_discovery, settle_mig_geometry,
    InvalidMigGeometry, ServedNode,
};
pub use served::Served;
pub use unit::Unit;
