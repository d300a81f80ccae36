//! What a review of the parsers found them to accept, panic on or misplace: each test here
//! failed before its fix.

use hetsched_core::input::Source;
use hetsched_core::input::binding::parse_binding_events;

/// The error a binding event file gets, as a line.
fn binding_error(text: &str) -> String {
    match parse_binding_events("b.txt", text) {
        Ok(lines) => panic!("accepted {text:?}: {lines:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_binding_line_with_a_multibyte_blank_names_the_right_column_without_panicking() {
    // U+00A0 and U+3000 are whitespace of 2 and 3 bytes: counting each as one byte put the
    // column of `extra` inside a character, and line_col panicked.
    assert_eq!(
        binding_error("add-nnode n1 r\u{a0}extra\n"),
        "b.txt:1:16: unexpected `extra`: expected `add-nnode NAME RACK`"
    );
    assert_eq!(
        binding_error("add-anode\u{a0}a1 r heavy\n"),
        "b.txt:1:16: invalid WEIGHT `heavy`: expected a positive number"
    );
    assert_eq!(
        binding_error("remove\u{3000}a\u{3000}b\n"),
        "b.txt:1:10: unexpected `b`: expected `remove NAME`"
    );
}

#[test]
fn a_location_inside_a_character_is_its_start_not_a_panic() {
    let src = Source::new("x.txt", "ab\n\u{e9}\u{3000}z");
    // Byte 4 is inside `é` (bytes 3..5), byte 6 inside U+3000 (bytes 5..8).
    assert_eq!(src.line_col(4), (2, 1));
    assert_eq!(src.line_col(6), (2, 2));
    assert_eq!(src.line_col(8), (2, 3));
    assert_eq!(src.line_col(1000), (2, 4));
}
