//! Scheduling policies. Each family lives in its own module; baselines sit beside the seed
//! algorithm they are compared with, so every comparison runs on the same code.

pub mod batch;
pub mod binding;
pub mod divisible;
pub mod graph;
pub mod stream;
