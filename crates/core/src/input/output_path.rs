//! Where a batch task's stdout and stderr go when its application says so (`stdout =` and
//! `stderr =` in a job file, `hetsched submit --stdout/--stderr`), instead of the agent's
//! capture files: a path template, or [`DISCARD`].
//!
//! A template is a file path with placeholders that each task fills in — `{job}`, `{app}`,
//! `{index}`, `{task}` and `{attempt}` (Slurm's `%j`/`%a`, HyperQueue's `%{JOB_ID}`/
//! `%{TASK_ID}`). A relative path is taken from the task's working directory on its node. The
//! parser checks a template ([`check`]); the agent fills it in ([`expand`]) when it starts the
//! task. One definition here keeps the two in agreement.

/// The value that discards a stream (HyperQueue's `--stdout none`): the task's stream goes to
/// `/dev/null` and nothing is kept. A file named `none` is written `./none`.
pub const DISCARD: &str = "none";

/// The placeholders a template may hold, in the order error messages list them.
pub const PLACEHOLDERS: [&str; 5] = ["job", "app", "index", "task", "attempt"];

/// Other schedulers' placeholders and ours for them: a template that holds one is refused with
/// the translation, since it would otherwise name a file literally `out-%j.txt`.
const FOREIGN: [(&str, &str); 7] = [
    ("%{JOB_ID}", "{job}"),
    ("%{TASK_ID}", "{index}"),
    ("%{INSTANCE_ID}", "{attempt}"),
    ("%j", "{job}"),
    ("%A", "{job}"),
    ("%a", "{index}"),
    ("%x", "{app}"),
];

/// Longest template, bytes (a path on the node).
pub const MAX_OUTPUT_PATH: usize = 4096;

/// What a task fills a template with.
#[derive(Clone, Copy, Debug)]
pub struct Fill<'a> {
    /// Its job's id.
    pub job: u64,
    /// Its application's name.
    pub app: &'a str,
    /// Its index within the application (`{index}` in its command).
    pub index: u32,
    /// Its task id (unique on the server).
    pub task: u64,
    /// The attempt (0 first; a retry or a resubmission counts up).
    pub attempt: u32,
}

/// Checks a template as written: 1 to [`MAX_OUTPUT_PATH`] bytes without NUL, a file name at its
/// end, and each `{…}` one of [`PLACEHOLDERS`]. [`DISCARD`] passes.
pub fn check(template: &str) -> Result<(), String> {
    if template.is_empty() || template.len() > MAX_OUTPUT_PATH || template.contains('\0') {
        return Err(format!(
            "must be a file path of 1 to {MAX_OUTPUT_PATH} bytes without NUL, or `{DISCARD}`"
        ));
    }
    if template == DISCARD {
        return Ok(());
    }
    if template.ends_with('/') || template.ends_with("/.") || template.ends_with("/..") {
        return Err(format!(
            "`{template}` names a directory: end it with a file name, e.g. `{}/{{index}}.out`",
            template.trim_end_matches(['/', '.'])
        ));
    }
    if let Some((theirs, ours)) = FOREIGN.iter().find(|(t, _)| template.contains(t)) {
        return Err(format!(
            "`{theirs}` in `{template}` is another scheduler's placeholder: write `{ours}` \
             (a path may hold {})",
            placeholders_in_words()
        ));
    }
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let name = after.find('}').map(|close| &after[..close]);
        match name {
            Some(n) if PLACEHOLDERS.contains(&n) => rest = &after[n.len() + 1..],
            _ => {
                let shown: String = match name {
                    Some(n) => format!("{{{n}}}"),
                    None => format!("{{{after}"),
                };
                return Err(format!(
                    "unknown placeholder `{shown}` in `{template}`: a path may hold {}",
                    placeholders_in_words()
                ));
            }
        }
    }
    if rest.contains('}') {
        return Err(format!(
            "a `}}` without its `{{` in `{template}`: a path may hold {}",
            placeholders_in_words()
        ));
    }
    Ok(())
}

/// Whether a checked template names a file of its own for each task of an application: it
/// holds `{index}` or `{task}`, or it names no file kept ([`DISCARD`], a device under `/dev/`).
/// Without that, the tasks of an application of more than one task would each truncate the
/// same file, and only the last one's output would be kept.
pub fn per_task(template: &str) -> bool {
    template == DISCARD
        || template.starts_with("/dev/")
        || template.contains("{index}")
        || template.contains("{task}")
}

/// Whether a checked template names files of their own for each application: it holds `{app}`
/// or `{task}`, or it names no file kept.
pub fn per_app(template: &str) -> bool {
    template == DISCARD
        || template.starts_with("/dev/")
        || template.contains("{app}")
        || template.contains("{task}")
}

/// `{job}, {app}, {index}, {task} or {attempt}`.
fn placeholders_in_words() -> String {
    let all: Vec<String> = PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect();
    let (last, first) = all
        .split_last()
        .map_or((String::new(), &[][..]), |(l, f)| (l.clone(), f));
    format!("{} or {last}", first.join(", "))
}

/// The path a checked template names for one task.
pub fn expand(template: &str, fill: &Fill<'_>) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}');
        let value = close.and_then(|c| match &after[..c] {
            "job" => Some(fill.job.to_string()),
            "app" => Some(fill.app.to_string()),
            "index" => Some(fill.index.to_string()),
            "task" => Some(fill.task.to_string()),
            "attempt" => Some(fill.attempt.to_string()),
            _ => None,
        });
        match (value, close) {
            (Some(v), Some(c)) => {
                out.push_str(&v);
                rest = &after[c + 1..];
            }
            // Not a placeholder (a template the parser did not check): kept as written.
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_the_rest_kept() {
        let f = Fill {
            job: 7,
            app: "solve",
            index: 42,
            task: 1042,
            attempt: 1,
        };
        assert_eq!(
            expand("/data/{job}/{app}-{index}.{attempt}.out", &f),
            "/data/7/solve-42.1.out"
        );
        assert_eq!(expand("logs/t{task}-{index}{index}", &f), "logs/t1042-4242");
        assert_eq!(expand("plain.txt", &f), "plain.txt");
        assert_eq!(expand("odd{x}{", &f), "odd{x}{");
    }

    #[test]
    fn a_template_with_an_unknown_placeholder_or_no_file_name_is_refused_by_name() {
        for ok in [
            "out.txt",
            "/abs/{job}/{index}.out",
            "none",
            "a/{attempt}",
            "{task}",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        let e = check("out-{jobid}.txt").expect_err("unknown");
        assert!(
            e.contains("unknown placeholder `{jobid}`")
                && e.contains("{job}, {app}, {index}, {task} or {attempt}"),
            "{e}"
        );
        let e = check("slurm-%j.out").expect_err("Slurm's");
        assert!(e.contains("`%j`") && e.contains("write `{job}`"), "{e}");
        let e = check("o/%{TASK_ID}.txt").expect_err("HyperQueue's");
        assert!(
            e.contains("`%{TASK_ID}`") && e.contains("write `{index}`"),
            "{e}"
        );
        assert_eq!(check("50%done.txt"), Ok(()));
        let e = check("out-{index").expect_err("unclosed");
        assert!(e.contains("`{index`"), "{e}");
        let e = check("out-index}.txt").expect_err("stray");
        assert!(e.contains("a `}` without its `{`"), "{e}");
        let e = check("logs/").expect_err("a directory");
        assert!(
            e.contains("names a directory") && e.contains("logs/{index}.out"),
            "{e}"
        );
        assert!(check("").is_err());
        assert!(check("a\0b").is_err());
        assert!(check(&"x".repeat(MAX_OUTPUT_PATH + 1)).is_err());
    }
}
