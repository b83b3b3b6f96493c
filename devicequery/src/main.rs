//! `devicequery` binary: everything lives in the library (see lib.rs).
fn main() {
    std::process::exit(edgegpu_devicequery::run(std::env::args_os().collect()));
}
