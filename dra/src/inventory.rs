//! TODO(skeleton): see the module list in lib.rs.
