//! Workflows on shared accelerators (spec 01 with spec 05) end to end with the real `hetsched`
//! binary on loopback: rack A holds an ANode (one declared GPU and its accelerator service) and
//! an NNode bound to it, rack B an NNode bound to none. A workflow's GPU task that only the
//! NNodes may run (`requires = ["side"]`, which the ANode lacks) runs on the bound NNode, which
//! offloads each instance to the ANode: its input (fetched from a CPU producer's agent) is
//! shipped there, it runs in a temporary directory there, and its output comes back into the
//! instance's directory on the NNode, where a CPU consumer fetches it.

use crate::runtime_accel::{start_configured_rack_agent, wait_bound};
use crate::support::Cluster;
use crate::workflow_runtime::wait_done;

use serde_json::Value;
use std::time::Duration;

/// Three stages: `make` ×2 (CPU) writes a_k = 10·k; `gpu` ×2 (one device each, only on nodes
/// with `side`) writes b_k = a_k + 1 and logs where it ran; `sum` (CPU) writes Σb = 32.
fn workflow(balancer: &str, log: &str) -> String {
    format!(
        r#"balancer = "{balancer}"

[[task]]
name = "make"
instances = "1..=2"
outputs = ["a"]
command = "echo $(({{index}} * 10)) > {{output:a}}"

[[task]]
name = "gpu"
instances = "1..=2"
gpus = 1
requires = ["side"]
inputs = ["a"]
outputs = ["b"]
command = "echo gpu-{{index}} $(pwd) {{input:a}} {{output:b}} >> $RUNLOG; echo $(( $(cat {{input:a}}) + 1 )) > {{output:b}}"
env = {{ RUNLOG = "{log}" }}

[[task]]
name = "sum"
instances = 1
inputs = ["b"]
outputs = ["c"]
command = "s=0; for f in {{input:b}}; do s=$((s + $(cat $f))); done; echo $s > {{output:c}}"
"#
    )
}

/// The workflow under `balancer` on the cluster: it completes with Σb = 32; both GPU instances
/// were placed on the bound NNode and ran on the ANode, in its temporary directory, with paths
/// relative to it; their outputs are in their instance directories on the NNode.
fn run_on_shared_accelerators(c: &Cluster, balancer: &str) {
    let log = c.dir.join(format!("gpu-{balancer}.log"));
    let file = c.write(
        &format!("wf-{balancer}.toml"),
        &workflow(balancer, &log.display().to_string()),
    );
    let v = c.json(&["submit", &file.display().to_string()]);
    let job = v["job_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job id in {v}"));
    let v = wait_done(c, job, Duration::from_secs(60));
    assert_eq!(v["state"], "completed", "{v}");
    let seq = job & 0xff_ffff_ffff_ffff;
    let tasks = c.tasks(job);
    let gpu: Vec<&Value> = tasks.iter().filter(|t| t["app"] == "gpu").collect();
    assert_eq!(gpu.len(), 2, "{tasks:?}");
    for t in &gpu {
        assert_eq!(
            (t["node"].as_str(), t["executed_node"].as_str()),
            (Some("nnode-a"), Some("anode")),
            "placed on the bound NNode, run on its ANode: {t}"
        );
        // The output came back into the instance's directory on the NNode.
        let k = t["index"].as_u64().expect("index");
        let out = c
            .dir
            .join(format!("agent-nnode-a/wf/{seq}/gpu-{}/out/b", k - 1));
        let b = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        assert_eq!(b.trim(), (10 * k + 1).to_string(), "{}", out.display());
    }
    // The command saw paths relative to a temporary directory of the ANode's.
    let ran = std::fs::read_to_string(&log).expect("the GPU instances' log");
    let lines: Vec<&str> = ran.lines().collect();
    assert_eq!(lines.len(), 2, "{ran}");
    for line in lines {
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words.len(), 4, "{line}");
        assert!(
            words[1].starts_with(&c.dir.join("agent-anode").display().to_string()),
            "runs in a directory of the ANode's: {line}"
        );
        assert_eq!((words[2], words[3]), ("in/a/0", "out/b"), "{line}");
    }
    let sum = tasks.iter().find(|t| t["app"] == "sum").expect("sum");
    let node = sum["node"].as_str().expect("node");
    let out = c.dir.join(format!("agent-{node}/wf/{seq}/sum-0/out/c"));
    let total = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    assert_eq!(total.trim(), "32", "Σ (a_k + 1)");
}

#[test]
fn a_workflows_gpu_task_runs_on_a_bound_nnode_through_its_anode_and_passes_its_data_on() {
    let mut c = Cluster::start("wf-accel", false);
    start_configured_rack_agent(
        &mut c,
        "anode",
        "A",
        "[[accelerator]]\nkind = \"sim\"\ncount = 1\n",
        &[],
    );
    start_configured_rack_agent(&mut c, "nnode-a", "A", "attributes = [\"side\"]\n", &[]);
    start_configured_rack_agent(&mut c, "nnode-b", "B", "attributes = [\"side\"]\n", &[]);
    wait_bound(&c, &[("anode", ""), ("nnode-a", "anode"), ("nnode-b", "")]);
    for balancer in ["centralised", "pcddb"] {
        run_on_shared_accelerators(&c, balancer);
    }
    for a in ["anode", "nnode-a", "nnode-b"] {
        let l = c.agent_log(a);
        assert!(!l.contains("input unavailable"), "{a}: {l}");
    }
}
