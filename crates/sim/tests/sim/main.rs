//! Integration tests of the simulator, gathered in one test binary.

mod common;
mod determinism;
mod exact;
mod properties;
mod validation;
