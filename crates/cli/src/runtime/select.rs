//! Job selections: what `hetsched cancel`, `wait`, `hold` and `release` act on — one job or many
//! (Slurm's `scancel 4 5 6`, HyperQueue's `hq job cancel 4-6` and `all`).
//!
//! A selection is a list of items, given as arguments or separated by commas: a job id (`7`),
//! a range of ids (`4-9`: the caller's jobs the server lists in it, so purged ids in between
//! are skipped, and named in a note on stderr, as are other users' jobs, as not the caller's), `name:NAME` (every job the server lists with that
//! name, `submit --name`; Slurm's `scancel --name`), `last` (the newest job) or `all` (every job not finished yet: pending or
//! running, held or waiting included). An id named on its own is kept even if the server does
//! not list it, so the command says `no job N` for it, as it does for one job.

use super::ClientArgs;
use super::client::{connect, is_final, refused};
use hetsched_proto as pb;

/// Most jobs one command acts on.
pub const MAX_SELECTED: usize = 10_000;

/// One item of a selection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobItem {
    /// This job id.
    Id(u64),
    /// The jobs listed with ids from the first to the second, both included.
    Range(u64, u64),
    /// The jobs listed with this name.
    Name(String),
    /// The newest job.
    Last,
    /// Every job not finished yet.
    All,
}

impl std::str::FromStr for JobItem {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        match s {
            "last" => return Ok(JobItem::Last),
            "all" => return Ok(JobItem::All),
            _ => {}
        }
        if let Some(name) = s.strip_prefix("name:") {
            let name = name.trim();
            if name.is_empty() {
                return Err("`name:` names no job: give the name, as `name:sweep`".into());
            }
            return Ok(JobItem::Name(name.to_string()));
        }
        let id = |t: &str| {
            t.trim().parse::<u64>().map_err(|_| {
                format!(
                    "`{s}` is not a job id (a number), a range (`4-9`), `name:NAME`, `last` or \
                     `all`"
                )
            })
        };
        match s.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (id(a)?, id(b)?);
                if a > b {
                    return Err(format!(
                        "`{s}`: a range goes from the lower id to the higher"
                    ));
                }
                Ok(JobItem::Range(a, b))
            }
            None => id(s).map(JobItem::Id),
        }
    }
}

/// A job as the server lists it, as far as a selection reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its id.
    pub id: u64,
    /// Its state (`running`, `completed`, …).
    pub state: String,
    /// Its name (empty: none).
    pub name: String,
}

/// Every job the server lists that the caller may change (one paged `ListJobs`; a user's own
/// jobs, every job for the admin).
pub(super) async fn listed(args: &ClientArgs) -> anyhow::Result<Vec<Listed>> {
    listed_where(args, true).await
}

/// Every job the server lists, whoever's, as `hetsched jobs` shows them.
pub(super) async fn listed_by_everyone(args: &ClientArgs) -> anyhow::Result<Vec<Listed>> {
    listed_where(args, false).await
}

/// Every job the server lists, `selectable` (the caller's to change) or everyone's, as
/// `hetsched jobs` shows them.
async fn listed_where(args: &ClientArgs, selectable: bool) -> anyhow::Result<Vec<Listed>> {
    let mut api = connect(args).await?;
    let (mut cursor, mut jobs) = (0, Vec::new());
    loop {
        let page = api
            .list_jobs(pb::ListJobsRequest {
                cursor,
                limit: 10_000,
                owner: String::new(),
                // A user's names, ranges and `all` pick among its own jobs.
                selectable,
            })
            .await
            .map_err(refused)?
            .into_inner();
        jobs.extend(page.jobs.into_iter().map(|j| Listed {
            id: j.id,
            state: j.state,
            name: j.name,
        }));
        if page.next_cursor == 0 {
            return Ok(jobs);
        }
        cursor = page.next_cursor;
    }
}

/// What a selection names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    /// The job ids, each once, in the order named (a range in id order).
    pub ids: Vec<u64>,
    /// Whether the selection is of the kind that names several jobs (more than one item, a
    /// range, a name or `all`), however many it found: its commands answer a JSON array, so a script's
    /// parsing does not depend on how many jobs there were.
    pub many: bool,
    /// When `all` selected nothing: how many unfinished jobs the server lists that are other
    /// users' (a user's `all` is its own unfinished jobs), for the note to say so.
    pub others_unfinished: usize,
}

/// The jobs `items` select. Lists the server's jobs only when an item needs it (a range, a name,
/// `last`, `all`). Empty only when `all` found nothing to select; a range or a name with no job
/// is an error that names it.
pub async fn resolve(items: &[JobItem], args: &ClientArgs) -> anyhow::Result<Selected> {
    let needs_listing = items.iter().any(|i| !matches!(i, JobItem::Id(_)));
    let jobs = if needs_listing {
        listed(args).await?
    } else {
        Vec::new()
    };
    let others = others_named(items, &jobs, args).await?;
    let ids = select(items, &jobs, &others)?;
    for note in unlisted(items, &jobs, &others) {
        eprintln!("note: {note}");
    }
    // A user's `all` that found none of its own: whether the others' unfinished jobs are why.
    let others_unfinished = if ids.is_empty() && items.contains(&JobItem::All) {
        let mine: std::collections::HashSet<u64> = jobs.iter().map(|j| j.id).collect();
        listed_where(args, false)
            .await?
            .iter()
            .filter(|j| !mine.contains(&j.id) && !is_final(&j.state))
            .count()
    } else {
        0
    };
    Ok(Selected {
        ids,
        others_unfinished,
        many: items.len() > 1
            || items
                .iter()
                .any(|i| matches!(i, JobItem::Range(..) | JobItem::Name(_) | JobItem::All)),
    })
}

/// The jobs `items` select for `hetsched purge`: ids and `last` as named (a job not finished
/// then refuses the purge, naming it), a range only the *finished* jobs the server lists in it
/// (its unfinished ones cannot be purged and are left; so a name), and no `all` (`--older-than
/// 0s` purges every finished job).
pub async fn resolve_finished(items: &[JobItem], args: &ClientArgs) -> anyhow::Result<Vec<u64>> {
    if items.contains(&JobItem::All) {
        anyhow::bail!(
            "`all` names the unfinished jobs, which cannot be purged: `--older-than 0s` purges every finished job"
        );
    }
    let needs_listing = items.iter().any(|i| !matches!(i, JobItem::Id(_)));
    let jobs = if needs_listing {
        listed(args).await?
    } else {
        Vec::new()
    };
    let others = others_named(items, &jobs, args).await?;
    let ids = select_where(items, &jobs, &others, "finished job", is_final)?;
    for note in unlisted(items, &jobs, &others) {
        eprintln!("note: {note}");
    }
    Ok(ids)
}

/// Whether range `a-b` holds an id that `own` (the caller's jobs) does not.
fn has_gap(a: u64, b: u64, own: &[Listed]) -> bool {
    let mut ids: Vec<u64> = own
        .iter()
        .map(|j| j.id)
        .filter(|id| (a..=b).contains(id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    (b - a).checked_add(1) != Some(ids.len() as u64)
}

/// The jobs the server lists that `items` name but are not the caller's (`own`): another
/// user's jobs in a range, which it skips saying so rather than as unlisted, and those of a
/// name none of `own` has, which it refuses as not the caller's rather than as unknown. Listed
/// (everyone's jobs, one paged `ListJobs`, which `hetsched jobs` shows anyone) only when a range
/// holds an id `own` lacks or a name matches none of `own`; none for the admin, whose own
/// listing is everyone's. In id order.
async fn others_named(
    items: &[JobItem],
    own: &[Listed],
    args: &ClientArgs,
) -> anyhow::Result<Vec<Listed>> {
    let ranges: Vec<(u64, u64)> = items
        .iter()
        .filter_map(|i| match *i {
            JobItem::Range(a, b) => Some((a, b)),
            _ => None,
        })
        .collect();
    let names: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            JobItem::Name(n) if !own.iter().any(|j| &j.name == n) => Some(n.as_str()),
            _ => None,
        })
        .collect();
    if names.is_empty() && !ranges.iter().any(|&(a, b)| has_gap(a, b, own)) {
        return Ok(Vec::new());
    }
    let mine: std::collections::HashSet<u64> = own.iter().map(|j| j.id).collect();
    let mut others: Vec<Listed> = listed_where(args, false)
        .await?
        .into_iter()
        .filter(|j| {
            !mine.contains(&j.id)
                && (ranges.iter().any(|&(a, b)| (a..=b).contains(&j.id))
                    || names.contains(&j.name.as_str()))
        })
        .collect();
    others.sort_unstable_by_key(|j| j.id);
    others.dedup_by_key(|j| j.id);
    Ok(others)
}

/// Ids in increasing order as runs of consecutive ones.
fn runs_of(ids: impl IntoIterator<Item = u64>) -> Runs {
    let mut runs: Runs = Vec::new();
    for id in ids {
        match runs.last_mut() {
            Some(run) if run.1.checked_add(1) == Some(id) => run.1 = id,
            _ => runs.push((id, id)),
        }
    }
    runs
}

/// Runs of ids, each from its first to its last, both included.
type Runs = Vec<(u64, u64)>;

/// Runs of ids as a note names them (`3, 5-7, 9`), at most [`MAX_GAPS_NAMED`], then how many
/// more.
fn runs_named(runs: &[(u64, u64)]) -> String {
    let mut named: Vec<String> = runs
        .iter()
        .take(MAX_GAPS_NAMED)
        .map(|&(x, y)| {
            if x == y {
                x.to_string()
            } else {
                format!("{x}-{y}")
            }
        })
        .collect();
    if runs.len() > MAX_GAPS_NAMED {
        named.push(format!("and {} more runs", runs.len() - MAX_GAPS_NAMED));
    }
    named.join(", ")
}

/// [`not_yours`] of job ids in any order.
pub(super) fn not_yours_ids(ids: &[u64]) -> String {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    not_yours(&runs_of(ids))
}

/// `job 4 is not yours`, `jobs 1, 4-5 are not yours`: runs of other users' jobs.
fn not_yours(runs: &[(u64, u64)]) -> String {
    let one = runs.len() == 1 && runs[0].0 == runs[0].1;
    if one {
        format!("job {} is not yours", runs_named(runs))
    } else {
        format!("jobs {} are not yours", runs_named(runs))
    }
}

/// The ids of range `a-b` the caller's jobs `own` leave out, as runs: those `others` holds
/// (other users' jobs) and those the server does not list at all.
fn gaps_of(a: u64, b: u64, own: &[Listed], others: &[Listed]) -> (Runs, Runs) {
    let mut marks: Vec<(u64, bool)> = own
        .iter()
        .map(|j| (j.id, false))
        .chain(others.iter().map(|j| (j.id, true)))
        .filter(|(id, _)| (a..=b).contains(id))
        .collect();
    marks.sort_unstable();
    marks.dedup_by_key(|m| m.0);
    let (mut theirs, mut missing): (Runs, Runs) = (Vec::new(), Vec::new());
    // `next`: the first id not yet accounted for; `None` past `u64::MAX`.
    let mut next = Some(a);
    for (id, other) in marks {
        if let Some(n) = next
            && id > n
        {
            missing.push((n, id - 1));
        }
        if other {
            match theirs.last_mut() {
                Some(run) if run.1.checked_add(1) == Some(id) && next == Some(id) => run.1 = id,
                _ => theirs.push((id, id)),
            }
        }
        next = id.checked_add(1);
    }
    if let Some(n) = next
        && n <= b
    {
        missing.push((n, b));
    }
    (theirs, missing)
}

/// Most runs of missing ids one note names; the rest are counted.
const MAX_GAPS_NAMED: usize = 8;

/// What each range of `items` names that is not among the caller's jobs `jobs`, one note a
/// range: the other users' jobs in it (`others`) as not the caller's, the ids the server does
/// not list (purged, or never submitted) as such (`` `1-9`: job 1 is not yours, and the server
/// lists no job 3, 5-9 (skipped) ``): a range acts on the caller's jobs listed in it, and says
/// which of its ids it skipped and why, so a mistyped range does not look done. A range with
/// none of the caller's jobs is refused instead ([`select`]), and says nothing here.
pub fn unlisted(items: &[JobItem], jobs: &[Listed], others: &[Listed]) -> Vec<String> {
    let mut notes = Vec::new();
    for item in items {
        let JobItem::Range(a, b) = *item else {
            continue;
        };
        if !jobs.iter().any(|j| (a..=b).contains(&j.id)) {
            continue;
        }
        let (theirs, missing) = gaps_of(a, b, jobs, others);
        let said = match (theirs.is_empty(), missing.is_empty()) {
            (true, true) => continue,
            (true, false) => format!("the server lists no job {}", runs_named(&missing)),
            (false, true) => not_yours(&theirs),
            (false, false) => format!(
                "{}, and the server lists no job {}",
                not_yours(&theirs),
                runs_named(&missing)
            ),
        };
        notes.push(format!("`{a}-{b}`: {said} (skipped)"));
    }
    notes
}

/// [`resolve`] against the listing `jobs` (the caller's), other users' jobs listed in its
/// ranges being `others`.
pub fn select(items: &[JobItem], jobs: &[Listed], others: &[Listed]) -> anyhow::Result<Vec<u64>> {
    select_where(items, jobs, others, "job", |_| true)
}

/// [`select`], a range or a name taking only the listed jobs whose state `keep` accepts (`what`
/// names them when there is none).
fn select_where(
    items: &[JobItem],
    jobs: &[Listed],
    others: &[Listed],
    what: &str,
    keep: impl Fn(&str) -> bool,
) -> anyhow::Result<Vec<u64>> {
    let mut ids: Vec<u64> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut add = |id: u64, ids: &mut Vec<u64>| -> anyhow::Result<()> {
        if seen.insert(id) {
            ids.push(id);
            if ids.len() > MAX_SELECTED {
                anyhow::bail!("the selection names more than {MAX_SELECTED} jobs: name fewer");
            }
        }
        Ok(())
    };
    for item in items {
        match item {
            JobItem::Id(id) => add(*id, &mut ids)?,
            JobItem::Range(a, b) => {
                let mut any = false;
                for j in jobs
                    .iter()
                    .filter(|j| (*a..=*b).contains(&j.id) && keep(&j.state))
                {
                    any = true;
                    add(j.id, &mut ids)?;
                }
                if !any {
                    let (theirs, _) = gaps_of(*a, *b, &[], others);
                    if theirs.is_empty() {
                        anyhow::bail!("`{a}-{b}`: the server lists no {what} in this range");
                    }
                    // As a name that only other users' jobs have: not the caller's to change.
                    return Err(anyhow::Error::new(super::human::Exit {
                        status: super::human::NO_PERMISSION_STATUS,
                        message: format!(
                            "`{a}-{b}`: the server lists no {what} of yours in this range ({})",
                            not_yours(&theirs)
                        ),
                    }));
                }
            }
            JobItem::Name(name) => {
                let mut any = false;
                for j in jobs.iter().filter(|j| &j.name == name && keep(&j.state)) {
                    any = true;
                    add(j.id, &mut ids)?;
                }
                if !any {
                    let theirs = runs_of(others.iter().filter(|j| &j.name == name).map(|j| j.id));
                    if theirs.is_empty() {
                        anyhow::bail!("`name:{name}`: the server lists no {what} named `{name}`");
                    }
                    // As a job named by id that is another user's: not the caller's to change.
                    return Err(anyhow::Error::new(super::human::Exit {
                        status: super::human::NO_PERMISSION_STATUS,
                        message: format!(
                            "`name:{name}`: the server lists no {what} of yours named `{name}` \
                             ({})",
                            not_yours(&theirs)
                        ),
                    }));
                }
            }
            JobItem::Last => {
                let newest = jobs.iter().map(|j| j.id).max();
                let id = newest.ok_or_else(|| {
                    anyhow::anyhow!(
                        "`last`: the server lists no job to select (a user's `last` is its \
                             own newest job, and it has none)"
                    )
                })?;
                add(id, &mut ids)?;
            }
            JobItem::All => {
                for j in jobs.iter().filter(|j| !is_final(&j.state)) {
                    add(j.id, &mut ids)?;
                }
            }
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(s: &[&str]) -> Vec<JobItem> {
        s.iter().map(|i| i.parse().expect("item")).collect()
    }

    #[test]
    fn ids_ranges_names_last_and_all_select_the_listed_jobs_once_each() {
        let jobs: Vec<Listed> = [
            (1, "completed", "sweep"),
            (2, "running", ""),
            (4, "pending", "sweep"),
            (5, "failed", "train"),
            (6, "running", "sweep"),
        ]
        .iter()
        .map(|(id, s, n)| Listed {
            id: *id,
            state: s.to_string(),
            name: n.to_string(),
        })
        .collect();
        // A name takes every job listed with it, in any state; a purge its finished ones.
        assert_eq!(
            select(&items(&["name:sweep"]), &jobs, &[]).expect("named"),
            vec![1, 4, 6]
        );
        assert_eq!(
            select(&items(&["name:train", "2"]), &jobs, &[]).expect("named"),
            vec![5, 2]
        );
        assert_eq!(
            select_where(
                &items(&["name:sweep"]),
                &jobs,
                &[],
                "finished job",
                is_final
            )
            .expect("finished"),
            vec![1]
        );
        let e = select(&items(&["name:none"]), &jobs, &[]).expect_err("no such name");
        assert!(
            e.to_string()
                .contains("`name:none`: the server lists no job named `none`"),
            "{e}"
        );
        assert!("name:".parse::<JobItem>().is_err());
        assert_eq!(select(&items(&["7"]), &[], &[]).expect("ids"), vec![7]);
        // A range takes the listed ids (3 was purged); `last` the newest; repeats count once.
        assert_eq!(
            select(&items(&["2-5", "last", "4"]), &jobs, &[]).expect("range"),
            vec![2, 4, 5, 6]
        );
        assert_eq!(
            select(&items(&["all"]), &jobs, &[]).expect("all"),
            vec![2, 4, 6]
        );
        assert!(
            select(&items(&["all"]), &jobs[..1], &[])
                .expect("none")
                .is_empty()
        );
        let e = select(&items(&["8-9"]), &jobs, &[]).expect_err("empty range");
        assert!(
            e.to_string().contains("`8-9`: the server lists no job"),
            "{e}"
        );
        assert!(select(&items(&["last"]), &[], &[]).is_err());
        // For a purge, a range takes its finished jobs only.
        assert_eq!(
            select_where(&items(&["1-6"]), &jobs, &[], "finished job", is_final).expect("finished"),
            vec![1, 5]
        );
        let e = select_where(&items(&["6"]), &jobs, &[], "finished job", is_final).expect("named");
        assert_eq!(
            e,
            vec![6],
            "a job named alone is kept: the server refuses it by name"
        );
        let e = select_where(&items(&["2-4"]), &jobs, &[], "finished job", is_final)
            .expect_err("none finished");
        assert!(
            e.to_string().contains("no finished job in this range"),
            "{e}"
        );
        for bad in ["x", "5-", "-5", "9-4", "1-2-3"] {
            assert!(bad.parse::<JobItem>().is_err(), "{bad}");
        }
        assert_eq!("3 - 5".parse::<JobItem>(), Ok(JobItem::Range(3, 5)));
        let many: Vec<Listed> = (1..=MAX_SELECTED as u64 + 1)
            .map(|id| Listed {
                id,
                state: "running".to_string(),
                name: String::new(),
            })
            .collect();
        assert!(select(&items(&["all"]), &many, &[]).is_err());
    }

    #[test]
    fn a_range_names_the_ids_in_it_the_server_does_not_list() {
        let listed = |ids: &[u64]| -> Vec<Listed> {
            ids.iter()
                .map(|&id| Listed {
                    id,
                    state: "pending".to_string(),
                    name: String::new(),
                })
                .collect()
        };
        let jobs = listed(&[1, 2, 4, 8]);
        assert_eq!(
            unlisted(&items(&["1-9", "2", "1-2", "last"]), &jobs, &[]),
            vec!["`1-9`: the server lists no job 3, 5-7, 9 (skipped)".to_string()]
        );
        // A range with nothing listed is select's refusal, not a note.
        assert!(unlisted(&items(&["20-30"]), &jobs, &[]).is_empty());
        // The top of the id space, and many runs cut short.
        let top = listed(&[u64::MAX - 1]);
        assert_eq!(
            unlisted(&[JobItem::Range(u64::MAX - 2, u64::MAX)], &top, &[]),
            vec![format!(
                "`{}-{}`: the server lists no job {}, {} (skipped)",
                u64::MAX - 2,
                u64::MAX,
                u64::MAX - 2,
                u64::MAX
            )]
        );
        let odd = listed(&(1..=40).step_by(2).collect::<Vec<_>>());
        let note = &unlisted(&items(&["1-40"]), &odd, &[])[0];
        assert!(
            note.ends_with("2, 4, 6, 8, 10, 12, 14, 16, and 12 more runs (skipped)"),
            "{note}"
        );
    }

    /// Another user's jobs in a range are named as not the caller's, apart from the ids the
    /// server does not list; a range holding none of the caller's is refused saying so.
    #[test]
    fn a_range_names_other_users_jobs_apart_from_the_unlisted_ones() {
        let mine: Vec<Listed> = [2, 3, 7]
            .iter()
            .map(|&id| Listed {
                id,
                state: "pending".to_string(),
                name: String::new(),
            })
            .collect();
        let others: Vec<Listed> = [1, 4, 5, 9]
            .iter()
            .map(|&id| Listed {
                id,
                state: "pending".to_string(),
                name: if id == 9 { "theirs" } else { "" }.to_string(),
            })
            .collect();
        assert_eq!(
            unlisted(&items(&["1-10"]), &mine, &others),
            vec![
                "`1-10`: jobs 1, 4-5, 9 are not yours, and the server lists no job 6, 8, 10 \
                 (skipped)"
                    .to_string()
            ]
        );
        assert_eq!(
            unlisted(&items(&["1-3"]), &mine, &others),
            vec!["`1-3`: job 1 is not yours (skipped)".to_string()]
        );
        assert_eq!(
            unlisted(&items(&["2-3"]), &mine, &others),
            Vec::<String>::new()
        );
        // Not interleaved with the caller's: 4-5 is one run, 5 and 9 are not.
        assert_eq!(gaps_of(1, 10, &mine, &others).0, [(1, 1), (4, 5), (9, 9)]);
        assert_eq!(
            select(&items(&["1-3"]), &mine, &others).expect("selected"),
            vec![2, 3]
        );
        let e = select(&items(&["4-6"]), &mine, &others).expect_err("none of mine");
        assert!(
            e.to_string().contains(
                "`4-6`: the server lists no job of yours in this range (jobs 4-5 are not yours)"
            ),
            "{e}"
        );
        // Other users' jobs only: `EX_NOPERM`, as a job named by id that is another user's.
        assert_eq!(super::super::human::exit_status(&e), Some(77));
        let e = select(&items(&["10-12"]), &mine, &others).expect_err("none listed");
        assert!(
            e.to_string()
                .contains("`10-12`: the server lists no job in this range"),
            "{e}"
        );
        assert_eq!(super::super::human::exit_status(&e), None);
        // A name only another user's job has is not the caller's, with `EX_NOPERM` as a job
        // named by id that is another user's.
        let e = select(&items(&["name:theirs"]), &mine, &others).expect_err("not mine");
        assert_eq!(
            e.to_string(),
            "`name:theirs`: the server lists no job of yours named `theirs` (job 9 is not yours)"
        );
        assert_eq!(super::super::human::exit_status(&e), Some(77));
        assert_eq!(runs_of([1, 2, 3, 5, 7, 8]), [(1, 3), (5, 5), (7, 8)]);
    }
}
