//! Cost of listing jobs (`ListJobs`, `hetsched jobs`), which runs under the state's lock: a page
//! of 10,000 pending batch jobs on a cluster of 1,000 nodes, each job explaining why it waits
//! (`pending_reason`). Two clusters: `busy` — node 0 has the attribute the jobs require, so a
//! job waits for busy nodes; `drained` — only node 999 has it, and it is drained, so every job
//! is blocked and the nodes that could run it must be found among all 1,000 (once per
//! application shape per listing: `Read::capable`).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hetsched_core::testkit::ScratchDir;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::hint::black_box;

const NODES: usize = 1_000;
const JOBS: usize = 10_000;

/// A state with `NODES` nodes, one of which (`with`) has attribute `x`, drained if `drained`,
/// and `JOBS` one-task jobs requiring `x` that no heartbeat has dispatched.
fn state(dir: &std::path::Path, with: usize, drained: bool) -> State {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("dir");
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    for i in 0..NODES {
        s.register(pb::RegisterRequest {
            identity: "bench".into(),
            name: format!("n{i}"),
            cores: 4,
            memory_bytes: 1 << 30,
            attributes: if i == with {
                vec!["x".into()]
            } else {
                Vec::new()
            },
            ..Default::default()
        })
        .expect("register");
    }
    if drained {
        s.on_drain(&format!("n{with}"), true).expect("drain");
    }
    let job = "[[application]]\nname = \"a\"\ntasks = 1\nrequires = [\"x\"]\n\
               [application.cpu]\ncommand = \"true\"\n";
    for _ in 0..JOBS {
        s.submit("job.toml", job, "/").expect("submit");
    }
    s
}

fn listing(c: &mut Criterion) {
    let mut g = c.benchmark_group("list_jobs_10000_pending_on_1000_nodes");
    g.sample_size(20);
    // Each case's data directory is in it; removed, with what is left, when the bench ends.
    let base = ScratchDir::new("bench", "listing");
    for (case, with, drained) in [("busy", 0, false), ("drained", NODES - 1, true)] {
        let dir = base.join(case);
        let s = state(&dir, with, drained);
        g.bench_function(BenchmarkId::from_parameter(case), |b| {
            b.iter(|| black_box(s.list_jobs(0, JOBS as u32)))
        });
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, listing);
}
criterion_main!(group::benches);
