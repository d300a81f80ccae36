//! Warnings about `{word}` in a job's commands that the agent will not replace: in a batch
//! job only `{index}` (and `{entry}`, for an application with entries) are placeholders, in a
//! workflow task `{index}` (its `{input:…}` and `{output:…}` the server checks), in a divisible
//! load `{start}`, `{end}`, `{chunk}` and `{input}` — so a typo such as `{indx}` would reach the
//! program as written. Warned, not refused: braces are common in commands (`awk '{print $1}'`,
//! `${HOME}`), and those are left alone.

use hetsched_core::input::workload::{Command, Workload};

/// The warnings for a submitted file's commands, whatever its kind (none for a file that does
/// not parse: the server names its error).
pub fn for_file(origin: &str, text: &str) -> Vec<String> {
    if hetsched_core::input::workflow_runtime::is_workflow(text) {
        return hetsched_core::input::workflow_runtime::parse_runtime_workflow(origin, text)
            .map(|w| {
                w.parsed
                    .specs
                    .iter()
                    .zip(&w.tasks)
                    .flat_map(|(spec, t)| {
                        unknown_in(
                            t.argv.iter().map(String::as_str),
                            &["index"],
                            &format!("task `{}`", spec.name.get_ref()),
                            "a workflow task's are {index}, {input:NAME} and {output:NAME}",
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
    }
    let Ok(w) = hetsched_core::input::workload::parse_workload(origin, text) else {
        return Vec::new();
    };
    let mut out = warnings(&w);
    for d in &w.divisible {
        out.extend(unknown_in(
            words(d.command.get_ref()),
            &["start", "end", "chunk", "input"],
            &format!("divisible load `{}`", d.name.get_ref()),
            "a divisible load's are {start}, {end}, {chunk} and {input}",
        ));
    }
    out
}

/// The arguments of a command as the placeholders are looked for in them.
fn words(c: &Command) -> Vec<&str> {
    match c {
        Command::Shell(s) => vec![s.as_str()],
        Command::Argv(v) => v.iter().map(String::as_str).collect(),
    }
}

/// A warning for each `{word}` of `args` (once each) that is not one of `known`: `what` names
/// the command's owner, `placeholders` says which there are. `{kind:name}` is the server's to
/// check.
fn unknown_in<'a>(
    args: impl IntoIterator<Item = &'a str>,
    known: &[&str],
    what: &str,
    placeholders: &str,
) -> Vec<String> {
    let mut seen: Vec<&str> = Vec::new();
    for word in args.into_iter().flat_map(unknown) {
        if !known.contains(&word) && !word.contains(':') && !seen.contains(&word) {
            seen.push(word);
        }
    }
    seen.into_iter()
        .map(|word| {
            format!(
                "warning: {what}: `{{{word}}}` is not a placeholder ({placeholders}); it reaches \
                 the program as written"
            )
        })
        .collect()
}

/// The warnings for `w`'s commands (empty when every `{word}` is a placeholder).
pub fn warnings(w: &Workload) -> Vec<String> {
    let mut out = Vec::new();
    for a in &w.applications {
        let entries = a.entries.is_some();
        let commands = [
            a.cpu.as_ref().and_then(|c| c.get_ref().command.as_ref()),
            a.gpu.as_ref().and_then(|g| g.get_ref().command.as_ref()),
        ];
        let mut seen: Vec<String> = Vec::new();
        for c in commands.into_iter().flatten() {
            for word in words(c).into_iter().flat_map(unknown) {
                let known = word == "index" || (word == "entry" && entries);
                if !known && !seen.iter().any(|s| s == word) {
                    seen.push(word.to_string());
                }
            }
        }
        for word in seen {
            let why = if word == "entry" {
                "`{entry}` is replaced only in an application with entries (`--each-line`)"
                    .to_string()
            } else {
                format!(
                    "`{{{word}}}` is not a placeholder (a batch task's are {{index}} and {{entry}})"
                )
            };
            out.push(format!(
                "warning: application `{}`: {why}; it reaches the program as written",
                a.name.get_ref()
            ));
        }
    }
    out
}

/// The `word`s of `{word}` in `s` that look like placeholders: a letter or `_` first, then
/// letters, digits, `_`, `:`, `.` or `-`; not `${word}` (the shell's) nor `%{word}`.
fn unknown(s: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(open) = s[i..].find('{').map(|k| i + k) {
        let close = s[open..].find('}').map(|k| open + k);
        let Some(close) = close else { break };
        let word = &s[open + 1..close];
        let shell = open > 0 && matches!(bytes[open - 1], b'$' | b'%');
        let looks = word
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.' | '-'));
        if looks && !shell {
            found.push(word);
        }
        i = open + 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::input::workload::parse_workload;

    fn warn(command: &str, extra: &str) -> Vec<String> {
        let text = format!(
            "[[application]]\nname = \"a\"\ntasks = 2\n{extra}\n[application.cpu]\ncommand = {command}\n"
        );
        warnings(&parse_workload("job.toml", &text).expect("parses"))
    }

    #[test]
    fn a_mistyped_placeholder_is_warned_and_braces_of_the_shell_or_awk_are_not() {
        let w = warn(r#"["./solve", "--seed", "{indx}", "{index}"]"#, "");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("`{indx}` is not a placeholder"), "{w:?}");
        for quiet in [
            r#""./solve {index} > out-{index}""#,
            r#""awk '{print $1}' in | sort""#,
            r#""echo ${HOME} %{x}""#,
            r#"["jq", "{a: .b}"]"#,
        ] {
            assert!(warn(quiet, "").is_empty(), "{quiet}: {:?}", warn(quiet, ""));
        }
        let w = warn(r#""gzip {entry}""#, "");
        assert!(
            w[0].contains("only in an application with entries"),
            "{w:?}"
        );
    }

    /// A workflow task's and a divisible load's commands are looked at too, each against its
    /// own placeholders.
    #[test]
    fn a_mistyped_placeholder_of_a_workflow_or_divisible_load_is_warned() {
        let wf = "[[task]]\nname = \"t\"\ninstances = 2\noutputs = [\"m\"]\n\
                  command = \"echo {indx} {index} > {output:m}; awk '{print $1}' x\"\n";
        let w = for_file("wf.toml", wf);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("warning: task `t`: `{indx}` is not a placeholder (a workflow task's"),
            "{w:?}"
        );
        let load = "[[divisible]]\nname = \"x\"\nunits = 10\n\
                    command = \"echo {start} {end} {chunk} {chunkk}\"\n";
        let w = for_file("d.toml", load);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("warning: divisible load `x`: `{chunkk}` is not a placeholder"),
            "{w:?}"
        );
        assert!(
            for_file("bad.toml", "[[task]\n").is_empty(),
            "the server names it"
        );
    }
}
