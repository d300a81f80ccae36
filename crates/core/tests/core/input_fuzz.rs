//! Every input parser against mangled files: the repository's example files (and a divisible
//! job and a runtime workflow) with values replaced by hostile ones (zero, negative, huge, NaN,
//! empty, reversed ranges, absurd durations and sizes), lines dropped, doubled or swapped, and
//! stray bytes inserted. Whatever the text, a parser returns — it never panics, loops or tries
//! to allocate for a number it was handed — and a refusal names the file it read and, where it
//! names a line, a line of that file.

use hetsched_core::input::InputError;
use hetsched_core::input::cluster::parse_cluster;
use hetsched_core::testkit::mangle::mangle;
use proptest::prelude::*;
use std::panic::{AssertUnwindSafe, catch_unwind};

const DIVISIBLE_JOB: &str = r#"
name = "rows"
[[divisible]]
name = "product"
units = 480
command = ["hetsched", "matrows", "--start", "{start}", "--end", "{end}", "--input", "{input}"]
unit_bytes = 256
output = "concat"
algo = "umrlm"
memory_per_unit = "1MiB"
retries = 2
time_limit = "60s"
requires = ["bigmem"]
"#;

const RUNTIME_WORKFLOW: &str = r#"balancer = "pcddb"
[[task]]
name = "A"
instances = "1..=3"
processes = 2
cost = { mean = "1s", cv = 0.5 }
outputs = ["m"]
command = "echo {index} > {output:m}"
retries = 2
[[task]]
name = "B"
instances = "1..=3"
cost = "1s"
inputs = ["m"]
outputs = ["r"]
command = ["sumfiles", "{input:m}", "{output:r}"]
env = { X = "1" }
time_limit = "10s"
memory = "1GiB"
cores = 1
"#;

/// Draws for [`mangle`]: one to five mutations of a file.
fn draws() -> impl Strategy<Value = Vec<(u8, usize, usize)>> {
    prop::collection::vec(any::<(u8, usize, usize)>(), 1..6)
}

/// Runs `parse` on `text`; fails the case on a panic or on an error that does not name
/// `origin` or names a line the text does not have.
fn check<T>(
    origin: &str,
    text: &str,
    parse: impl FnOnce(&str, &str) -> Result<T, InputError>,
) -> Result<(), TestCaseError> {
    let outcome = catch_unwind(AssertUnwindSafe(|| parse(origin, text).err()));
    let Ok(error) = outcome else {
        return Err(TestCaseError::fail(format!(
            "{origin}: the parser panicked on:\n{text}"
        )));
    };
    if let Some(e) = error {
        let shown = e.to_string();
        prop_assert!(
            shown.starts_with(&format!("{origin}:")),
            "the error does not name the file: {shown}"
        );
        prop_assert!(!e.message.trim().is_empty(), "an empty message: {shown}");
        let lines = text.lines().count() + 1;
        if let Some(line) = e.line {
            prop_assert!(
                (1..=lines).contains(&line),
                "line {line} of a {lines}-line text: {shown}\n{text}"
            );
        }
    }
    Ok(())
}

fn example(name: &str) -> String {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn mangled(seeds: usize) -> impl Strategy<Value = (usize, Vec<(u8, usize, usize)>)> {
    (0..seeds, draws())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn job_files_never_panic_and_refusals_name_the_file((seed, ms) in mangled(6)) {
        use hetsched_core::input::workload::parse_workload;
        let seeds = [
            example("job-hello.toml"),
            example("job-mixed.toml"),
            example("workload-mixed.toml"),
            example("workload-offload.toml"),
            example("workload-knn-nb-bp.toml"),
            DIVISIBLE_JOB.to_string(),
        ];
        // As the runtime takes a job file: parsed, then its bounds checked.
        check("job.toml", &mangle(&seeds[seed], &ms), |o, t| {
            let w = parse_workload(o, t)?;
            hetsched_core::input::limits::check(&w).map(|()| w)
        })?;
    }

    #[test]
    fn workflow_files_never_panic_and_refusals_name_the_file((seed, ms) in mangled(3)) {
        use hetsched_core::input::workflow::parse_workflow;
        use hetsched_core::input::workflow_runtime::parse_runtime_workflow;
        let seeds = [example("workflow-loop.toml"), example("workflow-mm5.toml"), RUNTIME_WORKFLOW.to_string()];
        let text = mangle(&seeds[seed], &ms);
        check("wf.toml", &text, parse_workflow)?;
        check("wf.toml", &text, parse_runtime_workflow)?;
    }

    #[test]
    fn cluster_and_latency_files_never_panic_and_refusals_name_the_file((seed, ms) in mangled(7)) {
        use hetsched_core::input::latency::parse_latency;
        let seeds = [
            example("cluster-graph-small.toml"),
            example("cluster-hdas-paper.toml"),
            example("cluster-mixed-generations.toml"),
            example("cluster-offload.toml"),
            example("cluster-pcddb-paper.toml"),
            example("cluster-streams-10.toml"),
            example("latency-pcddb-paper.toml"),
        ];
        let text = mangle(&seeds[seed], &ms);
        if seed == 6 {
            let cluster = parse_cluster("c.toml", &example("cluster-pcddb-paper.toml"))
                .unwrap_or_else(|e| panic!("{e}"));
            check("latency.toml", &text, |o, t| parse_latency(o, t, &cluster))?;
        } else {
            check("cluster.toml", &text, parse_cluster)?;
        }
    }

    #[test]
    fn topology_platform_and_binding_files_never_panic_and_refusals_name_the_file((seed, ms) in mangled(9)) {
        use hetsched_core::input::binding::parse_binding_events;
        use hetsched_core::input::star_platform::parse_star_platform;
        use hetsched_core::input::stream_code::parse_runnable_topology;
        use hetsched_core::input::topology::{parse_topology, parse_traffic};
        let seeds = [
            example("topology-ad-analytics.toml"),
            example("topology-chain.toml"),
            example("topology-diamond.toml"),
            example("topology-star.toml"),
            example("topology-wordcount.toml"),
            example("topology-wordcount-runtime.toml"),
            example("platform-divisible-paper.toml"),
            example("binding-figure3.txt"),
            example("traffic-wordcount.csv"),
        ];
        let text = mangle(&seeds[seed], &ms);
        match seed {
            0..=4 => check("topology.toml", &text, parse_topology)?,
            5 => check("topology.toml", &text, parse_runnable_topology)?,
            6 => check("platform.toml", &text, parse_star_platform)?,
            7 => check("events.txt", &text, parse_binding_events)?,
            _ => {
                let topology = parse_topology("t.toml", &example("topology-wordcount.toml"))
                    .unwrap_or_else(|e| panic!("{e}"));
                check("traffic.csv", &text, |o, t| parse_traffic(o, t, &topology))?;
            }
        }
    }
}
