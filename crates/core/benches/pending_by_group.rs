//! What finding one group's applications with pending tasks costs in the scheduler's view, as
//! the server's wake path does at each event that frees room under a user's cap
//! (`State::mark_capped_work`): 10,000 applications wait, 100 in each of 100 groups, and the
//! one freed group has 10 of them (a capped user beside everyone else's waiting work).
//!
//! `scan_every_pending_application`: the path before the view kept an index by group — every
//! application with pending tasks visited, and those of the freed group kept (its group looked
//! up in the sorted list of freed groups). `index_by_group`: `SchedulerView::pending_apps_in`.
//! Both add up the pending tasks they find, so the visit is not optimised away.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hetsched_core::model::{AppId, SchedulerView, TaskId};
use hetsched_core::testkit::app;
use std::hint::black_box;

/// Applications of the other groups, and of the freed one.
const OTHERS: u32 = 10_000;
const MINE: u32 = 10;
const GROUPS: u32 = 100;
/// The freed group (past the others').
const FREED: u32 = GROUPS;

fn view() -> SchedulerView {
    let mut v = SchedulerView::new();
    for i in 0..OTHERS + MINE {
        let id = AppId(i);
        v.add_application(
            app(&format!("a{i}")).tasks(2).cpu(1.0, 0.0).build(id),
            [TaskId(2 * u64::from(i)), TaskId(2 * u64::from(i) + 1)],
        )
        .expect("dense application ids");
        let group = if i < OTHERS { i % GROUPS } else { FREED };
        v.set_app_group(id, Some(group)).expect("grouped");
    }
    v
}

fn pending_by_group(c: &mut Criterion) {
    let v = view();
    let freed = [FREED];
    let mut g = c.benchmark_group("pending_apps_of_one_group");
    g.bench_function(
        BenchmarkId::new("scan_every_pending_application", OTHERS + MINE),
        |b| {
            b.iter(|| {
                black_box(&v)
                    .pending_apps()
                    .filter(|a| a.group.is_some_and(|g| freed.binary_search(&g).is_ok()))
                    .map(|a| a.pending.len())
                    .sum::<usize>()
            })
        },
    );
    g.bench_function(BenchmarkId::new("index_by_group", OTHERS + MINE), |b| {
        b.iter(|| {
            black_box(&v)
                .pending_apps_in(FREED)
                .map(|a| a.pending.len())
                .sum::<usize>()
        })
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, pending_by_group);
}
criterion_main!(group::benches);
