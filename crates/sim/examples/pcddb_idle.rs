//! Why pcddb is slower in the pcddb-paper scenario (docs/results/graphs.md, (ii)): for 12 and 48
//! hours of input, seeds 1–5 and each balancer on the paper's deployment (pcddb on Sc2, the
//! baselines on their random 14 + 3 subset), the run time, the core-seconds cores of the deployment
//! sat idle, how many of those passed while some instance was ready but not started (queued on
//! another node or at the launch node), and the protocol's messages.
//!
//! ```sh
//! cargo run --release -p hetsched-sim --example pcddb_idle
//! ```

use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::policy::graph::{BalancerKind, Thresholds};
use hetsched_core::time::NANOS_PER_SEC;
use hetsched_sim::graph::GraphResult;
use hetsched_sim::scenario::pcddb_paper::{Setup, mm5_workflow_text};

/// (idle core-seconds, idle core-seconds while an instance was ready but not started).
fn idle(r: &GraphResult, cores: u32) -> (f64, f64) {
    // +1 waiting when ready; waiting → running at start; −1 running at end.
    let mut events: Vec<(u64, i64, i64)> = Vec::with_capacity(3 * r.instances.len());
    for i in &r.instances {
        events.extend([(i.ready, 1, 0), (i.start, -1, 1), (i.end, 0, -1)]);
    }
    events.sort_unstable();
    let (mut waiting, mut running, mut last) = (0i64, 0i64, 0u64);
    let (mut total, mut with_work) = (0.0, 0.0);
    for (t, dw, dr) in events {
        let dt = (t - last) as f64 / NANOS_PER_SEC as f64;
        let idle = (i64::from(cores) - running).max(0);
        total += dt * idle as f64;
        with_work += dt * waiting.min(idle).max(0) as f64;
        waiting += dw;
        running += dr;
        last = t;
    }
    (total, with_work)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let setup = Setup::load()?;
    for hours in [12u32, 48] {
        let wf = parse_workflow("mm5.toml", &mm5_workflow_text(hours / 2))?.workflow;
        for seed in 1..=5u64 {
            for balancer in BalancerKind::ALL {
                let members = setup.deployment(balancer, seed);
                let cores = members
                    .iter()
                    .map(|m| setup.cluster.nodes[m.index()].cores)
                    .sum();
                let thresholds = Thresholds { lt: 2, mt: 10 };
                let r = setup.run(&wf, balancer, thresholds, &members, setup.launch, seed)?;
                let (total, with_work) = idle(&r, cores);
                let k = |kind: &str| r.messages.by_kind.get(kind).copied().unwrap_or(0);
                println!(
                    "{hours} h seed {seed} {:<11} run {:>6.1} s  idle core-s {total:>6.0}, with ready work waiting {with_work:>5.0}  \
                     request {} reply {} return {} status {}  launch node {}",
                    balancer.as_str(),
                    r.makespan_s(),
                    k("request"),
                    k("reply"),
                    k("return"),
                    k("status"),
                    r.messages.launch_node
                );
            }
        }
    }
    Ok(())
}
