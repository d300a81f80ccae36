//! Words in messages: a count with its noun, singular or plural (`1 task`, `3 tasks`), so that
//! every message reads as a sentence instead of `task(s)`; strings someone else supplied, as a
//! message quotes them ([`clip`]) or a terminal shows them ([`escape_controls`], [`escaped`]);
//! the invisible formatting characters ([`hidden`]) that a name may not hold
//! ([`hidden_problem`]) and every shown string has escaped.

use std::borrow::Cow;

/// `n` and `noun`, plural unless `n` is 1: `count(1, "task")` is `1 task`, `count(0, "node")`
/// is `0 nodes`. Every noun the messages count takes an `s`.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A real number as a message shows it: as Rust writes it (`0.5`, `1200`), but in scientific
/// notation when that would take many digits (`1e-300`, `2.5e20`): Rust's `{}` writes 1e-300 as
/// `0.` and 300 digits.
pub fn number(x: f64) -> String {
    let a = x.abs();
    if a != 0.0 && a.is_finite() && !(1e-4..1e16).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// The form of a verb that agrees with a count of `n`: `one` for 1, `many` otherwise
/// (`agree(1, "finishes", "finish")`).
pub fn agree<'a>(n: impl Into<u64>, one: &'a str, many: &'a str) -> &'a str {
    if n.into() == 1 { one } else { many }
}

/// How many names [`some_names`] lists before it says how many there are in all.
pub const NAMES_LISTED: usize = 8;

/// Names someone else supplied, as a message lists them: each [`clip`]ped, separated by commas,
/// the first [`NAMES_LISTED`] then `… (N in all)` when there are more (`a, b, c`), so that a
/// refusal that lists what there is stays short whatever a job holds.
pub fn some_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut shown = Vec::new();
    let mut total = 0usize;
    for n in names {
        if shown.len() < NAMES_LISTED {
            shown.push(clip(n));
        }
        total += 1;
    }
    let mut out = shown.join(", ");
    if total > shown.len() {
        out.push_str(&format!(", … ({total} in all)"));
    }
    out
}

/// How many characters of a string a message quotes ([`clip`]).
pub const QUOTED: usize = 64;

/// A string someone else supplied (a request's field, a file's value) as a message quotes it:
/// at most its first [`QUOTED`] characters (cut on a character boundary), then `…` if there was
/// more, with control characters escaped (an ANSI escape would act on the terminal that shows
/// the message), as is every other character Rust's `escape_debug` does not print as it is (the
/// invisible formatting characters of [`hidden`] among them). A refusal that echoed a whole field would send back whatever the client sent,
/// up to the gRPC limit (4 MiB), and write as much into the server's logs.
pub fn clip(s: &str) -> String {
    let mut shown: String = s
        .chars()
        .take(QUOTED)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if s.chars().nth(QUOTED).is_some() {
        shown.push('…');
    }
    shown
}

/// The characters [`hidden`] names, as (first, last, name): the format characters of Unicode
/// (general category Cf, Unicode 15) and the line and paragraph separators. None of them shows
/// as a glyph of its own, and each changes how the text around it reads: a bidi override or
/// isolate (U+202A–U+202E, U+2066–U+2069) reorders what follows it, so that `job\u{202e}txt.exe`
/// reads `jobexe.txt` ("Trojan Source"); a mark (U+200E, U+200F, U+061C) moves neutral
/// characters; a zero-width space or joiner (U+200B–U+200D, U+2060, U+FEFF) makes two names that
/// read the same differ; a tag character hides ASCII text. A name is what a person reads to
/// pick a job, a node or a topology, so it may hold none of them ([`hidden_problem`]); a
/// message shows each escaped (`\u{202e}`, [`escaped`]). Emoji joined by U+200D (a family) or
/// flags made of tag characters are shown escaped too: the set is the one Unicode defines, not
/// a guess at which of its uses are harmless. A name, where the first and last differ, is the
/// family's.
const HIDDEN: [(u32, u32, &str); 36] = [
    (0x00AD, 0x00AD, "SOFT HYPHEN"),
    (0x0600, 0x0605, "an Arabic number sign"),
    (0x061C, 0x061C, "ARABIC LETTER MARK"),
    (0x06DD, 0x06DD, "ARABIC END OF AYAH"),
    (0x070F, 0x070F, "SYRIAC ABBREVIATION MARK"),
    (0x0890, 0x0891, "an Arabic currency mark above"),
    (0x08E2, 0x08E2, "ARABIC DISPUTED END OF AYAH"),
    (0x180E, 0x180E, "MONGOLIAN VOWEL SEPARATOR"),
    (0x200B, 0x200B, "ZERO WIDTH SPACE"),
    (0x200C, 0x200C, "ZERO WIDTH NON-JOINER"),
    (0x200D, 0x200D, "ZERO WIDTH JOINER"),
    (0x200E, 0x200E, "LEFT-TO-RIGHT MARK"),
    (0x200F, 0x200F, "RIGHT-TO-LEFT MARK"),
    (0x2028, 0x2028, "LINE SEPARATOR"),
    (0x2029, 0x2029, "PARAGRAPH SEPARATOR"),
    (0x202A, 0x202A, "LEFT-TO-RIGHT EMBEDDING"),
    (0x202B, 0x202B, "RIGHT-TO-LEFT EMBEDDING"),
    (0x202C, 0x202C, "POP DIRECTIONAL FORMATTING"),
    (0x202D, 0x202D, "LEFT-TO-RIGHT OVERRIDE"),
    (0x202E, 0x202E, "RIGHT-TO-LEFT OVERRIDE"),
    (0x2060, 0x2060, "WORD JOINER"),
    (0x2061, 0x2064, "an invisible mathematical operator"),
    (0x2066, 0x2066, "LEFT-TO-RIGHT ISOLATE"),
    (0x2067, 0x2067, "RIGHT-TO-LEFT ISOLATE"),
    (0x2068, 0x2068, "FIRST STRONG ISOLATE"),
    (0x2069, 0x2069, "POP DIRECTIONAL ISOLATE"),
    (0x206A, 0x206F, "a deprecated formatting character"),
    (0xFEFF, 0xFEFF, "ZERO WIDTH NO-BREAK SPACE"),
    (0xFFF9, 0xFFFB, "an interlinear annotation character"),
    (0x110BD, 0x110BD, "KAITHI NUMBER SIGN"),
    (0x110CD, 0x110CD, "KAITHI NUMBER SIGN ABOVE"),
    (0x13430, 0x1343F, "an Egyptian hieroglyph format control"),
    (0x1BCA0, 0x1BCA3, "a shorthand format control"),
    (0x1D173, 0x1D17A, "a musical symbol format control"),
    (0xE0001, 0xE0001, "LANGUAGE TAG"),
    (0xE0020, 0xE007F, "a tag character"),
];

/// The entry of [`HIDDEN`] that holds `c`, if one does.
fn hidden_entry(c: char) -> Option<&'static (u32, u32, &'static str)> {
    let c = u32::from(c);
    // Sorted and disjoint (a test checks it): the last entry that starts at or before `c`.
    let i = HIDDEN.partition_point(|&(first, _, _)| first <= c);
    HIDDEN[..i].last().filter(|&&(_, last, _)| c <= last)
}

/// Whether `c` is an invisible formatting character: a bidi control (U+202A–U+202E,
/// U+2066–U+2069, U+200E, U+200F, U+061C), a zero-width one (U+200B–U+200D, U+2060, U+FEFF), a
/// tag, or another of the format characters of Unicode, or U+2028/U+2029 ([`HIDDEN`] lists
/// them and says why).
pub fn hidden(c: char) -> bool {
    hidden_entry(c).is_some()
}

/// `c` as a message names it: `U+202E RIGHT-TO-LEFT OVERRIDE`, `U+E0041 (a tag character)`;
/// `U+XXXX` alone for a character outside [`HIDDEN`].
pub fn code_point(c: char) -> String {
    let n = u32::from(c);
    match hidden_entry(c) {
        Some(&(first, last, name)) if first == last => format!("U+{n:04X} {name}"),
        Some(&(_, _, family)) => format!("U+{n:04X} ({family})"),
        None => format!("U+{n:04X}"),
    }
}

/// Why a name cannot hold `s`, if it cannot for an invisible formatting character ([`hidden`]):
/// `U+202E RIGHT-TO-LEFT OVERRIDE is not allowed`, naming the first one. Every check of a name
/// that refuses control characters (a job's, an application's, a topology's, a rack's…) asks
/// it too, and puts the field before it.
pub fn hidden_problem(s: &str) -> Option<String> {
    s.chars()
        .find(|&c| hidden(c))
        .map(|c| format!("{} is not allowed", code_point(c)))
}

/// Why a name cannot hold `s`, if it holds a control character or an invisible formatting
/// character ([`hidden`]): the first one, by its place (counted in characters from 1) and code
/// point, `character 3 is U+001B (a control character), which is not allowed`, `character 4 is
/// U+202E RIGHT-TO-LEFT OVERRIDE, which is not allowed`. For a name that may otherwise hold any
/// character (an agent's rack, a workflow task's component): the place says where to look in a
/// name that reads as if it held none.
pub fn unshown_problem(s: &str) -> Option<String> {
    let (i, c) = s
        .chars()
        .enumerate()
        .find(|&(_, c)| c.is_control() || hidden(c))?;
    let what = if c.is_control() {
        format!("U+{:04X} (a control character)", u32::from(c))
    } else {
        code_point(c)
    };
    Some(format!(
        "character {} is {what}, which is not allowed",
        i + 1
    ))
}

/// Whether `c` is escaped by [`escape_controls`]: a control character but `\n`, or an
/// invisible formatting character ([`hidden`]).
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n') || hidden(c)
}

/// The characters [`escaped`] escapes, as the body of a regular expression's character class
/// with the `u` flag (`\u{0}-\u{9}\u{b}-…`): the dashboard's script escapes the same ones in
/// what it shows (the server puts this in it), so the set is written once, here.
pub fn escaped_class() -> String {
    use std::fmt::Write;
    // The control characters but `\n`: C0 without U+000A, DEL and C1.
    let mut ranges = vec![(0x0, 0x9), (0xB, 0x1F), (0x7F, 0x9F)];
    ranges.extend(HIDDEN.iter().map(|&(first, last, _)| (first, last)));
    let mut class = String::new();
    for (first, last) in ranges {
        let _ = write!(class, "\\u{{{first:x}}}");
        if last != first {
            let _ = write!(class, "-\\u{{{last:x}}}");
        }
    }
    class
}

/// Escapes the control characters of `text` but `\n`, and its invisible formatting characters
/// ([`hidden`]), as Rust writes them (`\u{1b}`, `\r`, `\t`, `\u{202e}`): what an agent reports
/// quotes what a user's task wrote or named (its command, the last line of its stderr), and the
/// server shows it to every user — in `hetsched tasks`, `hetsched topology show`, its own log —
/// where an ANSI escape would act on the reader's terminal (retitle it, rewrite what it shows,
/// set its clipboard), a `\r` hide what the line said, and a bidi override make it read
/// otherwise than it is.
pub fn escape_controls(text: &mut String) {
    if let Cow::Owned(out) = escaped(text) {
        *text = out;
    }
}

/// `s` with its control characters but `\n` and its invisible formatting characters escaped, as
/// [`escape_controls`] does; borrowed when it has none. What the CLI prints of what a server
/// sent (a name, a message), so that an older or hostile server cannot put a terminal escape on
/// the user's terminal, nor a name stored before names were checked for them reorder a line.
pub fn escaped(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{
        Cow, HIDDEN, agree, clip, code_point, count, escape_controls, escaped, escaped_class,
        hidden, hidden_problem, number, some_names, unshown_problem,
    };

    #[test]
    fn a_list_of_names_is_bounded_and_says_how_many_in_all() {
        assert_eq!(some_names(["echo"]), "echo");
        assert_eq!(some_names(["a", "b\u{1b}"]), "a, b\\u{1b}");
        let many: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
        assert_eq!(
            some_names(many.iter().map(String::as_str)),
            "n0, n1, n2, n3, n4, n5, n6, n7, … (20 in all)"
        );
        assert_eq!(some_names(std::iter::empty()), "");
    }

    #[test]
    fn numbers_are_plain_unless_they_would_take_many_digits() {
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(1200.0), "1200");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(1e-300), "1e-300");
        assert_eq!(number(-2.5e20), "-2.5e20");
        assert_eq!(number(f64::NAN), "NaN");
    }

    /// "Trojan Source": a name such as `job\u{202e}txt.exe` reads `jobexe.txt` wherever it is
    /// shown. Names holding a bidi control, a zero-width joiner or another invisible formatting
    /// character are refused, naming the code point; plain names, other scripts and visible
    /// punctuation pass.
    #[test]
    fn a_name_with_a_bidi_control_or_another_invisible_formatting_character_is_refused() {
        assert_eq!(
            hidden_problem("job\u{202e}txt.exe").as_deref(),
            Some("U+202E RIGHT-TO-LEFT OVERRIDE is not allowed")
        );
        for (name, named) in [
            ("a\u{202a}b", "U+202A LEFT-TO-RIGHT EMBEDDING"),
            ("a\u{202c}", "U+202C POP DIRECTIONAL FORMATTING"),
            ("\u{2066}x\u{2069}", "U+2066 LEFT-TO-RIGHT ISOLATE"),
            ("x\u{2069}", "U+2069 POP DIRECTIONAL ISOLATE"),
            ("x\u{200e}", "U+200E LEFT-TO-RIGHT MARK"),
            ("x\u{200f}", "U+200F RIGHT-TO-LEFT MARK"),
            ("x\u{61c}", "U+061C ARABIC LETTER MARK"),
            ("ad\u{200d}min", "U+200D ZERO WIDTH JOINER"),
            ("ad\u{200b}min", "U+200B ZERO WIDTH SPACE"),
            ("\u{feff}job", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
            ("a\u{ad}b", "U+00AD SOFT HYPHEN"),
            ("a\u{2028}b", "U+2028 LINE SEPARATOR"),
            ("a\u{e0041}", "U+E0041 (a tag character)"),
            ("a\u{206a}", "U+206A (a deprecated formatting character)"),
        ] {
            assert_eq!(
                hidden_problem(name),
                Some(format!("{named} is not allowed")),
                "{name:?}"
            );
        }
        for name in [
            "job-1",
            "données_2",
            "作业",
            "عمل",
            "a.b-c_d",
            "x y",
            "👍",
            "",
        ] {
            assert_eq!(hidden_problem(name), None, "{name:?}");
        }
        assert_eq!(code_point('x'), "U+0078");
        assert!(!hidden('\u{1f}') && !hidden('\u{2065}') && !hidden('\u{2070}'));
        assert!(hidden('\u{e007f}') && !hidden('\u{e0080}') && !hidden('\u{e0000}'));
    }

    #[test]
    fn an_unshown_character_is_named_by_its_place_and_code_point() {
        assert_eq!(
            unshown_problem("r\u{1b}[2J").as_deref(),
            Some("character 2 is U+001B (a control character), which is not allowed")
        );
        assert_eq!(
            unshown_problem("é\u{202e}x").as_deref(),
            Some("character 2 is U+202E RIGHT-TO-LEFT OVERRIDE, which is not allowed")
        );
        for ok in ["", "rack 1", "données", "👍"] {
            assert_eq!(unshown_problem(ok), None, "{ok:?}");
        }
    }

    /// The table is sorted and its entries disjoint, as the search in `hidden_entry` needs:
    /// every first and last code point of an entry is found, and none between two entries.
    #[test]
    fn the_hidden_table_is_sorted_and_disjoint() {
        for w in HIDDEN.windows(2) {
            assert!(w[0].0 <= w[0].1 && w[0].1 < w[1].0, "{w:?}");
        }
        for &(first, last, _) in &HIDDEN {
            for c in [first, last] {
                assert!(hidden(char::from_u32(c).expect("a char")), "{c:X}");
            }
            for c in [first - 1, last + 1] {
                let c = char::from_u32(c).expect("a char");
                assert_eq!(
                    hidden(c),
                    HIDDEN.iter().any(|e| (e.0..=e.1).contains(&u32::from(c)))
                );
            }
        }
    }

    /// A message or a name shown to people has its invisible formatting characters escaped as
    /// its control characters are, so that `hetsched tasks` shows `job\u{202e}txt.exe` instead
    /// of `jobexe.txt`; a quoted string (`clip`) too.
    #[test]
    fn bidi_controls_and_zero_width_characters_are_escaped_like_control_characters() {
        assert_eq!(
            escaped("cannot start `job\u{202e}txt.exe`\u{2066}\u{200d}\n"),
            "cannot start `job\\u{202e}txt.exe`\\u{2066}\\u{200d}\n"
        );
        let mut s = String::from("a\u{200f}b\u{1b}");
        escape_controls(&mut s);
        assert_eq!(s, "a\\u{200f}b\\u{1b}");
        assert_eq!(clip("job\u{202e}txt\u{200b}"), "job\\u{202e}txt\\u{200b}");
        assert!(matches!(escaped("作业 عمل 👍"), Cow::Borrowed(_)));
    }

    /// The class the dashboard's script escapes holds every control character but `\n` and
    /// every entry of the table, written as a `u`-flag regular expression reads them.
    #[test]
    fn the_escaped_class_is_the_controls_but_newline_and_the_hidden_table() {
        let class = escaped_class();
        assert!(
            class.starts_with("\\u{0}-\\u{9}\\u{b}-\\u{1f}\\u{7f}-\\u{9f}\\u{ad}\\u{600}-\\u{605}"),
            "{class}"
        );
        assert!(
            class.contains("\\u{202e}\\u{2060}\\u{2061}-\\u{2064}"),
            "{class}"
        );
        assert!(
            class.ends_with("\\u{e0001}\\u{e0020}-\\u{e007f}"),
            "{class}"
        );
        assert!(!class.contains("\\u{a}"), "{class}");
    }

    #[test]
    fn control_characters_but_newline_are_escaped_and_plain_text_is_borrowed() {
        assert!(matches!(
            escaped("job-1 ü\nnext"),
            Cow::Borrowed("job-1 ü\nnext")
        ));
        assert_eq!(
            escaped("a\u{1b}]0;title\u{7}b\rc\td\u{9b}2J"),
            "a\\u{1b}]0;title\\u{7}b\\rc\\td\\u{9b}2J"
        );
        let mut s = String::from("x\u{1b}[31my\n");
        escape_controls(&mut s);
        assert_eq!(s, "x\\u{1b}[31my\n");
    }

    #[test]
    fn a_quoted_string_is_cut_after_64_characters_on_a_char_boundary_and_escaped() {
        assert_eq!(clip("queued"), "queued");
        let long = "é".repeat(1 << 20);
        let shown = clip(&long);
        assert_eq!(shown, format!("{}…", "é".repeat(64)));
        assert_eq!(clip(&"x".repeat(64)), "x".repeat(64), "64 fit whole");
        assert_eq!(clip("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
    }

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u32, "task"), "1 task");
        assert_eq!(count(0u32, "node"), "0 nodes");
        assert_eq!(count(12u64, "running task"), "12 running tasks");
        assert_eq!(agree(1u32, "finishes", "finish"), "finishes");
        assert_eq!(agree(2u32, "finishes", "finish"), "finish");
    }
}
