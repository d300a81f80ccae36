//! Words in messages: a count with its noun, singular or plural (`1 task`, `3 tasks`), so that
//! every message reads as a sentence instead of `task(s)`.

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

#[cfg(test)]
mod tests {
    use super::{agree, count};

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u32, "task"), "1 task");
        assert_eq!(count(0u32, "node"), "0 nodes");
        assert_eq!(count(12u64, "running task"), "12 running tasks");
        assert_eq!(agree(1u32, "finishes", "finish"), "finishes");
        assert_eq!(agree(2u32, "finishes", "finish"), "finish");
    }
}
