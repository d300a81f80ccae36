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
//! variant's `compute`, and a `required` application on a cluster with no accelerator.

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
                return Err(src.error(
                    start(a.name.span()),
                    Some(format!("application[{i}].cpu")),
                    format!(
                        "application `{name}` may run on a CPU (accelerator = \"{}\") but has no CPU variant",
                        need.as_str()
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
    Ok(apps)
}
