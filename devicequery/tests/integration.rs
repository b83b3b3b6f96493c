//! The devicequery's integration tests, one module per file, linked into one test binary.

mod common;

mod cli;
mod limits;
mod platforms;
