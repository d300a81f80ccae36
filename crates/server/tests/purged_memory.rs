//! What a purged job costs a long-lived server's heap: a few dozen bytes, whatever it ran, live
//! and after a restart. A server that runs jobs for months and purges them by its `[retention]`
//! rule must not grow with its history. Its own test binary: the heap is counted by a global
//! allocator (`cap`), and only this test may allocate meanwhile.

#[allow(dead_code)]
#[path = "server/common/mod.rs"]
mod common;

use common::register;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::alloc::System;
use std::path::Path;

#[global_allocator]
static HEAP: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// Jobs run and purged.
const JOBS: usize = 1_000;

/// The most heap one purged job may keep: its id in the purged set and the job-id map, and a
/// null slot per application id in the batch kind and the view, with their tables' room to
/// grow (51 bytes live and 57 after a restart when this was written). Before purged jobs'
/// records left memory it was over 1,100 bytes and what the job's file said.
const MOST_PER_PURGED_JOB: usize = 128;

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

/// A job whose file says much: a long command and environment, kept while the job is.
fn job_file(i: usize) -> String {
    let words = "--an-option-with-a-long-name value ".repeat(8);
    format!(
        "name = \"job-{i}\"\n[[application]]\nname = \"step-{i}\"\ntasks = 2\n\
         [application.cpu]\ncommand = \"./solver {words} --seed {{index}}\"\n\
         env = {{ INPUT = \"/data/inputs/{i}/{words}\" }}\n"
    )
}

fn run_and_purge(s: &mut State, n: u32, from: usize, to: usize) {
    for i in from..to {
        // Keyed, as `hetsched submit` sends every job.
        let key = format!("cli-key-{i:08}-0123456789abcdef");
        let job = s
            .submit_keyed("job.toml", &job_file(i), "/", &key)
            .expect("submit");
        assert_eq!(common::run_assigned(s, n), 2);
        assert_eq!(s.job(job.job_id).expect("job").state, "completed");
    }
    let purged = s
        .purge(&pb::PurgeRequest {
            job_ids: ((from + 1) as u64..=to as u64).collect(),
            ..Default::default()
        })
        .expect("purged");
    assert_eq!(purged.purged.len(), to - from);
}

#[test]
fn a_purged_job_costs_a_few_dozen_bytes_of_heap_live_and_after_a_restart() {
    let d = common::scratch("purged-memory", "heap");
    let mut s = open(&d);
    let n = register(&mut s, "n", 4);
    // The first jobs warm what every later one reuses (statement caches, metric series).
    run_and_purge(&mut s, n, 0, 50);
    let before = HEAP.allocated();
    run_and_purge(&mut s, n, 50, 50 + JOBS);
    let live = HEAP.allocated().saturating_sub(before) / JOBS;
    assert!(
        live <= MOST_PER_PURGED_JOB,
        "{live} bytes of heap per purged job, live"
    );
    drop(s);

    // An empty server's heap, then the same server over the purged history.
    let empty_dir = common::scratch("purged-memory", "empty");
    let base = HEAP.allocated();
    let empty = open(&empty_dir);
    let empty_heap = HEAP.allocated() - base;
    drop(empty);
    let base = HEAP.allocated();
    let s = open(&d);
    let restarted = (HEAP.allocated() - base).saturating_sub(empty_heap) / (50 + JOBS);
    assert!(
        restarted <= MOST_PER_PURGED_JOB,
        "{restarted} bytes of heap per purged job after a restart"
    );
    assert!(s.jobs().jobs.is_empty(), "no purged job is listed");
    println!("heap per purged job: {live} bytes live, {restarted} after a restart");
}
