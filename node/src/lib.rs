//! The library under edgegpu's node-side programs: what the device plugin, the DRA driver
//! and the labeller must read the same way, so that one value never means one thing to one
//! program and another to the next. Programs depend on it; it depends on no program.

pub mod quantity;
