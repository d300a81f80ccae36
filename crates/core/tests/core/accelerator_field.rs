//! The workload file's `accelerator = "required" | "preferred" | "none"` (spec 01): read by the one
//! workload parser, absent means `none`, and a bad value names its line.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use hetsched_core::input::workload::parse_workload;
use hetsched_core::model::application::AcceleratorNeed;

const BASE: &str = r#"
[[application]]
name = "lu"
tasks = 100
ACCEL
[application.cpu]
compute = "55s"
read = "0s"
[application.gpu]
compute = "6.2s"
read = "0s"
"#;

fn parse(accel: &str) -> Result<AcceleratorNeed, String> {
    let text = BASE.replace("ACCEL", accel);
    parse_workload("w.toml", &text)
        .map(|w| w.applications[0].accelerator_need())
        .map_err(|e| e.to_string())
}

#[test]
fn the_field_reads_the_three_words_and_defaults_to_none() {
    assert_eq!(parse(""), Ok(AcceleratorNeed::None));
    assert_eq!(
        parse(r#"accelerator = "required""#),
        Ok(AcceleratorNeed::Required)
    );
    assert_eq!(
        parse(r#"accelerator = "preferred""#),
        Ok(AcceleratorNeed::Preferred)
    );
    assert_eq!(parse(r#"accelerator = "none""#), Ok(AcceleratorNeed::None));
}

#[test]
fn a_bad_value_names_its_line_and_field() {
    let err = parse(r#"accelerator = "sometimes""#).unwrap_err();
    assert!(err.starts_with("w.toml:5:"), "{err}");
    assert!(err.contains("application[0].accelerator"), "{err}");
    assert!(err.contains("sometimes"), "{err}");
}

#[test]
fn an_accelerated_application_needs_a_gpu_variant() {
    let text = r#"
[[application]]
name = "cpu-only"
tasks = 1
accelerator = "required"
[application.cpu]
compute = "1s"
read = "0s"
"#;
    let err = parse_workload("w.toml", text).unwrap_err().to_string();
    assert!(err.starts_with("w.toml:5:"), "{err}");
    assert!(err.contains("has no [application.gpu] variant"), "{err}");
}
