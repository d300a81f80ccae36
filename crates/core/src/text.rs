//! Words in messages: a count with its noun, singular or plural (`1 task`, `3 tasks`), so that
//! every message reads as a sentence instead of `task(s)`; strings someone else supplied, as a
//! message quotes them ([`clip`]) or a terminal shows them ([`escape_controls`], [`escaped`]).

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

/// The form of a verb that agrees with a count of `n`: `one` for 1, `many` otherwise
/// (`agree(1, "finishes", "finish")`).
pub fn agree<'a>(n: impl Into<u64>, one: &'a str, many: &'a str) -> &'a str {
    if n.into() == 1 { one } else { many }
}

/// How many characters of a string a message quotes ([`clip`]).
pub const QUOTED: usize = 64;

/// A string someone else supplied (a request's field, a file's value) as a message quotes it:
/// at most its first [`QUOTED`] characters (cut on a character boundary), then `…` if there was
/// more, with control characters escaped (an ANSI escape would act on the terminal that shows
/// the message). A refusal that echoed a whole field would send back whatever the client sent,
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

/// Whether `c` is escaped by [`escape_controls`]: a control character but `\n`.
fn unsafe_char(c: char) -> bool {
    c.is_control() && c != '\n'
}

/// Escapes the control characters of `text` but `\n` as Rust writes them (`\u{1b}`, `\r`,
/// `\t`): what an agent reports quotes what a user's task wrote or named (its command, the
/// last line of its stderr), and the server shows it to every user — in `hetsched tasks`,
/// `hetsched topology show`, its own log — where an ANSI escape would act on the reader's
/// terminal (retitle it, rewrite what it shows, set its clipboard), and a `\r` hide what the
/// line said.
pub fn escape_controls(text: &mut String) {
    if let Cow::Owned(out) = escaped(text) {
        *text = out;
    }
}

/// `s` with its control characters but `\n` escaped, as [`escape_controls`] does; borrowed
/// when it has none. What the CLI prints of what a server sent (a name, a message), so that an
/// older or hostile server cannot put a terminal escape on the user's terminal.
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
    use super::{Cow, agree, clip, count, escape_controls, escaped};

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
