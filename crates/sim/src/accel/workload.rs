//! From a user's cluster and workload files to the offload simulator's inputs
//! (`hetsched sim accel`). The cluster needs no conversion: [`super::simulate_accel`] already
//! takes nodes with accelerators as ANodes, the others as NNodes, and binds within the file's
//! racks. Each application becomes one [`AccelApp`]:
//! - `tasks` and `accelerator` (`none` when absent) as written;
//! - CPU time = the CPU variant's `compute`; GPU time = the GPU variant's `compute + copy` (the
//!   device and its host↔device copies are what the accelerator service serialises). `read`
//!   times are not used: the offload model has no disk;
//! - input bytes = the application's `split` (the data a task reads is what an offloaded task
//!   ships to its ANode);
//! - **result size rule: the result is as large as the input** (`output_bytes = split`), as in
//!   spec 01's experiment, where the factorised matrix travels back at the size it went out.
//!   Workload files have no result-size field.
//!
//! Refused, with `file:line:col: field`: a `none` or `preferred` application without a CPU
//! variant's `compute` (it may run on a CPU), a `required` or `preferred` one without the GPU
//! variant's `compute`, and a `required` application on a cluster with no accelerator; then what
//! `sim run` refuses, with its errors ([`Workload::check_runnable`]: `requires` no node meets,
//! a variant no node has the cores, memory or GPUs of the right kind for); then every field the
//! offload model does not honour ([`unmodelled`]): it runs applications one after another from
//! t = 0 in file order, each task in one container of its node and, on an accelerator, on one
//! device of any kind — so `requires`, `priority`, `submit_at`, `max_running`, `user`,
//! `[[user]]`, `[[divisible]]`, and a variant's `cores`, `memory`, `gpus` and `kind` (of the
//! variants the application's `accelerator` lets it run) are refused, not silently ignored.
//! The runtime's own fields (`command`, `env`, `time_limit`, …) are ignored, as by `sim run`.

use super::AccelApp;
use hetsched_core::Cluster;
use hetsched_core::input::workload::Workload;
use hetsched_core::input::{InputError, Source};
use hetsched_core::model::application::AcceleratorNeed;
/// Offset of a written value; `None` for defaults, which have an empty span.
fn start(span: std::ops::Range<usize>) -> Option<usize> {
    (span.end > span.start).then_some(span.start)
}

/// The offload simulator's applications for `workload` on `cluster` (module doc).
pub fn accel_apps(workload: &Workload, cluster: &Cluster) -> Result<Vec<AccelApp>, InputError> {
    let src = Source::new(&workload.origin, &workload.text);
    let has_accelerator = cluster.nodes.iter().any(|n| !n.accelerators.is_empty());
    let mut apps = Vec::with_capacity(workload.applications.len());
    for (i, a) in workload.applications.iter().enumerate() {
        let name = a.name.get_ref();
        let need = a.accelerator_need();
        let need_at = a
            .accelerator
            .as_ref()
            .and_then(|s| start(s.span()))
            .or_else(|| start(a.name.span()));
        if let Some(n) = a.nodes.as_ref().filter(|n| *n.get_ref() > 1) {
            return Err(src.error(
                start(n.span()),
                Some(format!("application[{i}].nodes")),
                format!(
                    "application `{name}` holds {} whole nodes per task: multi-node tasks run on \
                     the runtime only",
                    n.get_ref()
                ),
            ));
        }
        if need == AcceleratorNeed::Required && !has_accelerator {
            return Err(src.error(
                need_at,
                Some(format!("application[{i}].accelerator")),
                format!(
                    "application `{name}` requires an accelerator, and no node of the cluster has one"
                ),
            ));
        }
        let cpu_time = match (&a.cpu, need) {
            (_, AcceleratorNeed::Required) => 0,
            (Some(c), _) => match c.get_ref().compute {
                Some(d) => d.0,
                None => {
                    return Err(src.error(
                        start(c.span()),
                        Some(format!("application[{i}].cpu.compute")),
                        "missing: the offload simulator needs the CPU time of a task",
                    ));
                }
            },
            (None, _) => {
                // A GPU-only application written for `sim run` has no `accelerator` field, and
                // here that means `none`: say so and name the fix instead of quoting a field the
                // user never wrote.
                let why = if a.accelerator.is_some() {
                    format!("accelerator = \"{}\"", need.as_str())
                } else {
                    "no `accelerator` field: `none`, CPUs only".to_string()
                };
                return Err(src.error(
                    start(a.name.span()),
                    Some(format!("application[{i}].cpu")),
                    format!(
                        "application `{name}` may run on a CPU ({why}) but has no CPU variant; \
                         add accelerator = \"required\" to run it on accelerators only"
                    ),
                ));
            }
        };
        let gpu_time = match (&a.gpu, need) {
            (_, AcceleratorNeed::None) => 0,
            (Some(g), _) => match g.get_ref().compute {
                Some(d) => d.0 + g.get_ref().copy.map_or(0, |c| c.0),
                None => {
                    return Err(src.error(
                        start(g.span()),
                        Some(format!("application[{i}].gpu.compute")),
                        "missing: the offload simulator needs the accelerator time of a task",
                    ));
                }
            },
            // The parser refuses this already; kept so the conversion never guesses.
            (None, _) => {
                return Err(src.error(
                    need_at,
                    Some(format!("application[{i}].gpu")),
                    format!("application `{name}` wants an accelerator but has no GPU variant"),
                ));
            }
        };
        let bytes = a.split.as_u64();
        apps.push(AccelApp {
            name: name.clone(),
            tasks: a.task_count(),
            need,
            cpu_time,
            gpu_time,
            input_bytes: bytes,
            output_bytes: bytes,
        });
    }
    // What `sim run` refuses, refused with its errors: the one check, not a copy of it.
    workload.check_runnable(&cluster.nodes)?;
    unmodelled(workload)?;
    Ok(apps)
}

/// The first field of `workload` the offload model cannot honour, as an error at it (module
/// doc): `sim accel` refuses what it would otherwise ignore, and `sim run` honours.
pub fn unmodelled(workload: &Workload) -> Result<(), InputError> {
    let src = Source::new(&workload.origin, &workload.text);
    let refuse = |offset: Option<usize>, field: String, what: String, why: &str| {
        Err(src.error(
            offset,
            Some(field),
            format!("{what}: {why}; `hetsched sim run` honours it"),
        ))
    };
    const ONE_CONTAINER: &str = "sim accel runs every task in one container of its node (--slots), \
                                 whatever it holds";
    const ONE_DEVICE: &str =
        "sim accel runs an accelerator task on one device of any kind, in one container";
    for (i, a) in workload.applications.iter().enumerate() {
        let name = a.name.get_ref();
        let field = |f: &str| format!("application[{i}].{f}");
        if let Some(r) = a.requires.first() {
            return refuse(
                start(r.span()),
                field("requires[0]"),
                format!("application `{name}` requires `{}`", r.get_ref()),
                "sim accel places tasks by binding, not by node attributes",
            );
        }
        // `priority`, `submit_at`, a variant's `memory` and `kind` are kept without their place:
        // read it again from the text, so the error points at the key refused, not at the
        // application's name or its variant's table.
        let key_at = |f: &str| src.key_at(&field(f)).or_else(|| start(a.name.span()));
        if a.priority != 0 {
            return refuse(
                key_at("priority"),
                field("priority"),
                format!("application `{name}` has priority {}", a.priority),
                "sim accel runs applications one after another, in file order",
            );
        }
        if a.submit_at.0 != 0 {
            return refuse(
                key_at("submit_at"),
                field("submit_at"),
                format!(
                    "application `{name}` is submitted at {} s",
                    hetsched_core::time::to_secs(a.submit_at.0)
                ),
                "sim accel has no arrival times (it runs applications one after another from \
                 t = 0)",
            );
        }
        if let Some(m) = &a.max_running {
            return refuse(
                start(m.span()),
                field("max_running"),
                format!(
                    "application `{name}` runs at most {} tasks at once",
                    m.get_ref()
                ),
                "sim accel runs as many as there are containers",
            );
        }
        if let Some(u) = &a.user {
            return refuse(
                start(u.span()),
                field("user"),
                format!("application `{name}` belongs to user `{}`", u.get_ref()),
                "sim accel has no users, shares or caps",
            );
        }
        let need = a.accelerator_need();
        if let Some(c) = a.cpu.as_ref().filter(|_| need != AcceleratorNeed::Required) {
            let cpu = c.get_ref();
            if *cpu.cores.get_ref() != 1 {
                return refuse(
                    start(cpu.cores.span()),
                    field("cpu.cores"),
                    format!("a CPU task of `{name}` holds {} cores", cpu.cores.get_ref()),
                    ONE_CONTAINER,
                );
            }
            if cpu.memory.as_u64() != 0 {
                return refuse(
                    src.key_at(&field("cpu.memory")).or_else(|| start(c.span())),
                    field("cpu.memory"),
                    format!("a CPU task of `{name}` holds {}", cpu.memory),
                    ONE_CONTAINER,
                );
            }
        }
        if let Some(g) = a.gpu.as_ref().filter(|_| need != AcceleratorNeed::None) {
            let gpu = g.get_ref();
            if *gpu.gpus.get_ref() != 1 {
                return refuse(
                    start(gpu.gpus.span()),
                    field("gpu.gpus"),
                    format!(
                        "an accelerator task of `{name}` holds {} GPUs",
                        gpu.gpus.get_ref()
                    ),
                    ONE_DEVICE,
                );
            }
            if let Some(k) = &gpu.kind {
                return refuse(
                    src.key_at(&field("gpu.kind")).or_else(|| start(g.span())),
                    field("gpu.kind"),
                    format!("an accelerator task of `{name}` needs a GPU of kind `{k}`"),
                    ONE_DEVICE,
                );
            }
            if *gpu.cores.get_ref() != 1 {
                return refuse(
                    start(gpu.cores.span()),
                    field("gpu.cores"),
                    format!(
                        "an accelerator task of `{name}` holds {} cores",
                        gpu.cores.get_ref()
                    ),
                    ONE_DEVICE,
                );
            }
            if gpu.memory.as_u64() != 0 {
                return refuse(
                    src.key_at(&field("gpu.memory")).or_else(|| start(g.span())),
                    field("gpu.memory"),
                    format!("an accelerator task of `{name}` holds {}", gpu.memory),
                    ONE_DEVICE,
                );
            }
        }
    }
    if let Some(u) = workload.users.first() {
        // A bare `[[user]]` is refused too (it declares a user, which sim accel has not): say
        // what the table holds rather than claim shares or caps it does not have.
        let has_limits = u.shares.is_some()
            || u.max_cores.is_some()
            || u.max_memory.is_some()
            || u.max_gpus.is_some();
        let what = if has_limits {
            format!("user `{}` has shares or caps", u.name.get_ref())
        } else {
            format!("a `[[user]]` table declares user `{}`", u.name.get_ref())
        };
        return refuse(
            start(u.name.span()),
            "user[0]".into(),
            what,
            "sim accel has no users, shares or caps",
        );
    }
    if let Some(d) = workload.divisible.first() {
        return Err(src.error(
            start(d.name.span()),
            Some("divisible[0]".into()),
            format!(
                "divisible load `{}`: sim accel runs applications' tasks, not divisible loads \
                 (`hetsched sim divisible` does)",
                d.name.get_ref()
            ),
        ));
    }
    Ok(())
}
