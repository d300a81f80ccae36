//! Names that hold an invisible formatting character (a bidi override or isolate, a mark, a
//! zero-width joiner: `hetsched_core::text::hidden`) are refused where a name with a control
//! character is, at the name's line and column, naming the code point: `job\u{202e}txt.exe`
//! would read `jobexe.txt` in every listing ("Trojan Source"). The files below write them as
//! TOML escapes, so that this file holds none.

use hetsched_core::input::{cluster, topology, workflow, workload};

fn refused<T>(parsed: Result<T, hetsched_core::input::InputError>) -> String {
    match parsed {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

const RLO: &str = "U+202E RIGHT-TO-LEFT OVERRIDE is not allowed";

#[test]
fn a_job_or_application_name_with_a_bidi_override_is_refused_at_its_position() {
    let job = |name: &str, app: &str| {
        format!(
            "name = \"{name}\"\n[[application]]\nname = \"{app}\"\ntasks = 1\n[application.cpu]\n\
             compute = \"1s\"\nread = \"1s\"\n"
        )
    };
    assert_eq!(
        refused(workload::parse_workload(
            "w.toml",
            &job("job\\u202Etxt.exe", "a")
        )),
        format!("w.toml:1:8: name: {RLO}")
    );
    assert_eq!(
        refused(workload::parse_workload(
            "w.toml",
            &job("j", "ad\\u200Dmin")
        )),
        "w.toml:3:8: application[0].name: U+200D ZERO WIDTH JOINER is not allowed"
    );
    assert_eq!(
        refused(workload::parse_workload("w.toml", &job("j", "\\u2066a"))),
        "w.toml:3:8: application[0].name: U+2066 LEFT-TO-RIGHT ISOLATE is not allowed"
    );
    // Other scripts, right-to-left ones included, are names like any other.
    assert!(workload::parse_workload("w.toml", &job("作业", "عمل")).is_ok());
}

#[test]
fn a_workflow_task_or_data_name_with_a_bidi_control_is_refused_at_its_position() {
    let flow = |name: &str, task: &str, output: &str| {
        format!(
            "name = \"{name}\"\n[[task]]\nname = \"{task}\"\ninstances = 1\ncost = \"1s\"\n\
             outputs = [\"{output}\"]\n"
        )
    };
    assert_eq!(
        refused(workflow::parse_workflow(
            "wf.toml",
            &flow("w\\u202E", "A", "m")
        )),
        format!("wf.toml:1:8: name: {RLO}")
    );
    assert_eq!(
        refused(workflow::parse_workflow(
            "wf.toml",
            &flow("w", "A\\u200F", "m")
        )),
        "wf.toml:3:8: task[0].name: U+200F RIGHT-TO-LEFT MARK is not allowed"
    );
    assert_eq!(
        refused(workflow::parse_workflow(
            "wf.toml",
            &flow("w", "A", "m\\u061C")
        )),
        "wf.toml:6:12: task[0].outputs[0]: U+061C ARABIC LETTER MARK is not allowed"
    );
    assert!(workflow::parse_workflow("wf.toml", &flow("w", "A", "m")).is_ok());
}

#[test]
fn a_topology_or_component_name_with_a_bidi_control_is_refused_at_its_position() {
    let topo = |name: &str, component: &str| {
        format!(
            "name = \"{name}\"\n[[component]]\nname = \"{component}\"\nkind = \"spout\"\n\
             parallelism = 1\ncpu = 10\nmemory = \"1MiB\"\n"
        )
    };
    assert_eq!(
        refused(topology::parse_topology("t.toml", &topo("t\\u202E", "s"))),
        format!("t.toml:1:8: name: {RLO}")
    );
    assert_eq!(
        refused(topology::parse_topology("t.toml", &topo("t", "s\\u2069"))),
        "t.toml:3:8: component[0].name: U+2069 POP DIRECTIONAL ISOLATE is not allowed"
    );
    assert!(topology::parse_topology("t.toml", &topo("t", "s")).is_ok());
}

#[test]
fn a_rack_attribute_or_requirement_with_a_bidi_control_is_refused() {
    let rack = "[[rack]]\nname = \"r\\u202E\"\n[[node]]\nname = \"n\"\ncores = 1\n";
    assert_eq!(
        refused(cluster::parse_cluster("c.toml", rack)),
        format!("c.toml:2:8: rack[0].name: rack name `r\\u{{202e}}`: {RLO}")
    );
    let kind = "[[node]]\nname = \"n\"\ncores = 1\n[[node.accelerator]]\nkind = \"g\\u200Bpu\"\n";
    let e = refused(cluster::parse_cluster("c.toml", kind));
    assert!(
        e.starts_with("c.toml:5:8: node[0].accelerator[0].kind: ")
            && e.ends_with("attribute `g\\u{200b}pu`: U+200B ZERO WIDTH SPACE is not allowed"),
        "{e}"
    );
    use hetsched_core::model::cluster::{check_attribute, check_requirement};
    assert_eq!(
        check_attribute("big\u{202e}mem"),
        Err(format!("attribute `big\\u{{202e}}mem`: {RLO}"))
    );
    assert_eq!(
        check_requirement("!node:gpu\u{202d}07"),
        Err(
            "requirement `!node:gpu\\u{202d}07`: U+202D LEFT-TO-RIGHT OVERRIDE is not allowed"
                .into()
        )
    );
    assert_eq!(check_requirement("!node:gpu07"), Ok(()));
}
