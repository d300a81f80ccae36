//! Output helpers shared by the scenarios: SVG charts.

pub mod plot;
