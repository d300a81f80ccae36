//! Node lists as HPC tools write them (Slurm's hostlists, pdsh's): names separated by commas,
//! where a bracket expands to a range of numbers — `gpu[01-04,07]` is gpu01, gpu02, gpu03,
//! gpu04 and gpu07, `r[1-2]n[1-3]` six names. A range keeps the width of its first number
//! (`01-10`: two digits). `hetsched node drain`, `node resume` and `tasks --node` read them.
//!
//! Written here because the one crate for it (`hostlist`) has had no release since 2020 and
//! pulls in an old parser-combinator library; the syntax is small and tested below.

/// The most names one list may expand to: a typo such as `n[1-1000000]` is refused, not sent.
pub const MAX_NAMES: usize = 10_000;

/// The names `text` lists, in order, each once as written (repeats are kept: the caller
/// decides). An error names the part that is wrong.
pub fn expand(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top(text)? {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("`{text}`: an empty name (two commas in a row?)"));
        }
        expand_item(item, &mut out)?;
        if out.len() > MAX_NAMES {
            return Err(format!(
                "`{text}` lists more than {MAX_NAMES} names: name fewer"
            ));
        }
    }
    Ok(out)
}

/// `text` split at the commas outside brackets.
fn split_top(text: &str) -> Result<Vec<&str>, String> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' if depth > 0 => return Err(format!("`{text}`: a bracket inside a bracket")),
            '[' => depth = 1,
            ']' if depth == 0 => return Err(format!("`{text}`: `]` without its `[`")),
            ']' => depth = 0,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(format!("`{text}`: `[` without its `]`"));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// Appends the names one item (`prefix[ranges]rest`, or a plain name) stands for.
fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = item.find('[') else {
        out.push(item.to_string());
        return Ok(());
    };
    // `split_top` checked the brackets pair up.
    let close = open
        + item[open..]
            .find(']')
            .ok_or_else(|| format!("`{item}`: `[` without its `]`"))?;
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let mut tails = Vec::new();
    expand_item_or_empty(rest, &mut tails)?;
    for range in ranges.split(',') {
        let range = range.trim();
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (lo.trim(), hi.trim()),
            None => (range, range),
        };
        let number = |s: &str| {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "`{item}`: `{range}` is not a number or a range of numbers (`1-4`)"
                ));
            }
            s.parse::<u64>()
                .map_err(|_| format!("`{item}`: `{s}` is too large"))
        };
        let (a, b) = (number(lo)?, number(hi)?);
        if a > b {
            return Err(format!(
                "`{item}`: the range `{range}` goes from the lower number to the higher"
            ));
        }
        if (b - a) as usize >= MAX_NAMES {
            return Err(format!(
                "`{item}` lists more than {MAX_NAMES} names: name fewer"
            ));
        }
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        for n in a..=b {
            for tail in &tails {
                out.push(format!("{prefix}{n:0width$}{tail}"));
            }
            if out.len() > MAX_NAMES {
                return Err(format!(
                    "`{item}` lists more than {MAX_NAMES} names: name fewer"
                ));
            }
        }
    }
    Ok(())
}

/// [`expand_item`] of what follows a bracket: nothing stands for one empty tail.
fn expand_item_or_empty(rest: &str, out: &mut Vec<String>) -> Result<(), String> {
    if rest.is_empty() {
        out.push(String::new());
        return Ok(());
    }
    expand_item(rest, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        expand(text).expect(text)
    }

    #[test]
    fn brackets_expand_to_ranges_keeping_their_width() {
        assert_eq!(names("a"), ["a"]);
        assert_eq!(names("a,b, c"), ["a", "b", "c"]);
        assert_eq!(names("gpu[01-03,07]"), ["gpu01", "gpu02", "gpu03", "gpu07"]);
        assert_eq!(names("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(names("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(
            names("r[1-2]n[1-2].lab,login"),
            ["r1n1.lab", "r1n2.lab", "r2n1.lab", "r2n2.lab", "login"]
        );
        assert_eq!(names("n[0]"), ["n0"]);
    }

    #[test]
    fn mistakes_are_named_and_large_lists_refused() {
        for (text, says) in [
            ("n[1-3", "`[` without its `]`"),
            ("n1-3]", "`]` without its `[`"),
            ("n[[1]]", "a bracket inside a bracket"),
            ("n[3-1]", "from the lower number to the higher"),
            ("n[a-b]", "`a-b` is not a number"),
            ("n[]", "is not a number"),
            ("a,,b", "an empty name"),
            ("n[1-100000]", "more than 10000 names"),
            ("r[1-200]n[1-200]", "more than 10000 names"),
            ("n[99999999999999999999]", "is too large"),
        ] {
            let e = expand(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
