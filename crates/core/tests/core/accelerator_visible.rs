//! An agent's `[[accelerator]] visible = [...]`: the names its tasks see in
//! `CUDA_VISIBLE_DEVICES` (MIG instances' UUIDs), checked with the entry's other fields, and
//! refused in a simulator's cluster file, where nothing runs.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use hetsched_core::input::Source;
use hetsched_core::input::cluster::{AcceleratorSpec, node_accelerators, visible_names};

#[derive(serde::Deserialize)]
struct Agent {
    accelerator: Vec<AcceleratorSpec>,
}

/// The devices and their names, or the error as a user reads it.
fn read(text: &str) -> Result<(usize, Vec<Option<String>>), String> {
    let agent: Agent = toml::from_str(text).map_err(|e| e.to_string())?;
    let src = Source::new("agent.toml", text);
    let devices =
        node_accelerators(&src, &agent.accelerator, "accelerator").map_err(|e| e.to_string())?;
    Ok((devices.len(), visible_names(&agent.accelerator)))
}

#[test]
fn named_devices_are_counted_by_their_names_and_the_others_keep_their_index() {
    let (count, names) = read(
        "[[accelerator]]\nkind = \"h100-1g\"\nmemory = \"10GiB\"\n\
         visible = [\"MIG-0a1b2c3d-1111-2222-3333-444455556666\", \"MIG-7e8f-2\"]\n\
         [[accelerator]]\nkind = \"h100\"\ncount = 1\n",
    )
    .unwrap();
    assert_eq!(count, 3, "two named instances without `count`, and one GPU");
    assert_eq!(
        names,
        [
            Some("MIG-0a1b2c3d-1111-2222-3333-444455556666".to_string()),
            Some("MIG-7e8f-2".to_string()),
            None
        ]
    );
    // A `count` that agrees is accepted.
    let (count, _) =
        read("[[accelerator]]\nkind = \"a100\"\ncount = 2\nvisible = [\"GPU-1\", \"GPU-2\"]\n")
            .unwrap();
    assert_eq!(count, 2);
}

#[test]
fn names_that_cannot_be_what_a_task_sees_are_refused_at_their_line() {
    for (entry, said) in [
        (
            "count = 3\nvisible = [\"MIG-a\", \"MIG-b\"]",
            "agent.toml:4:11: accelerator[0].visible: names 2 devices; `count` is 3",
        ),
        (
            "visible = []",
            "agent.toml:3:11: accelerator[0].visible: names no device",
        ),
        (
            "visible = [\"MIG-a,MIG-b\"]",
            "agent.toml:3:11: accelerator[0].visible: name 1 `MIG-a,MIG-b`: holds `,`",
        ),
        (
            "visible = [\"MIG-a\", \"\"]",
            "agent.toml:3:11: accelerator[0].visible: name 2 ``: empty",
        ),
        (
            "visible = [\"MIG-a\", \"MIG-a\"]",
            "agent.toml:3:11: accelerator[0].visible: names `MIG-a` twice on the node",
        ),
    ] {
        let e = read(&format!("[[accelerator]]\nkind = \"k\"\n{entry}\n")).unwrap_err();
        assert!(e.starts_with(said), "{entry}: {e}");
    }
    let long = "M".repeat(129);
    let e = read(&format!(
        "[[accelerator]]\nkind = \"k\"\nvisible = [\"{long}\"]\n"
    ))
    .unwrap_err();
    assert!(e.contains("129 bytes; at most 128"), "{e}");
    // Too many names: refused where they are written.
    let many: Vec<String> = (0..257).map(|i| format!("\"MIG-{i}\"")).collect();
    let e = read(&format!(
        "[[accelerator]]\nkind = \"k\"\nvisible = [{}]\n",
        many.join(", ")
    ))
    .unwrap_err();
    assert!(
        e.starts_with(
            "agent.toml:3:11: accelerator[0].visible: 257 accelerators; a node has at most 256"
        ),
        "{e}"
    );
    // One name on two entries of the node: two tasks would share the device.
    let e = read(
        "[[accelerator]]\nkind = \"a\"\nvisible = [\"MIG-x\"]\n\
         [[accelerator]]\nkind = \"b\"\nvisible = [\"MIG-x\"]\n",
    )
    .unwrap_err();
    assert!(
        e.starts_with("agent.toml:6:11: accelerator[1].visible: names `MIG-x` twice on the node"),
        "{e}"
    );
}

#[test]
fn a_simulated_node_names_no_devices() {
    let e = hetsched_core::input::cluster::parse_cluster(
        "c.toml",
        "[[node]]\nname = \"n\"\ncores = 4\n[[node.accelerator]]\nkind = \"k\"\nvisible = [\"MIG-a\"]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(
            "c.toml:6:11: node[0].accelerator[0].visible: names the devices an agent's tasks see"
        ),
        "{e}"
    );
}
