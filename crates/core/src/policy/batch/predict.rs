//! The heterogeneous task model's predictions (spec 02, eqs. (1)–(4)), in nanoseconds as `f64`.
//!
//! These are the *scheduler's* estimates from heartbeat figures; the simulator's disk model is a
//! separate mechanism, so prediction and outcome may differ — which is what HDAS is judged on.

use crate::model::{AppState, Application, Node, NodeState};
use crate::time::NANOS_PER_SEC;

/// Eq. (3), RECONSTRUCTED: read time of a new task that joins a disk with `sumio` outstanding bytes:
/// `max(td0, (sumio + V) / BW)`.
pub fn read_time(td0_ns: f64, sumio_bytes: f64, split_bytes: u64, disk_bw: f64) -> f64 {
    let contended = (sumio_bytes + split_bytes as f64) / disk_bw * NANOS_PER_SEC as f64;
    td0_ns.max(contended)
}

/// The outstanding bytes that can delay a new read of `split_bytes` on `node` (the `sumio` of
/// eq. (3)). With `cap_by_io_tasks`, each of the node's `#IOtask` readers counts with at most one
/// split: on a disk shared equally among its readers (processor sharing), a reader with more
/// than `V` bytes left is still reading when the new read ends, so it delays the new read by at
/// most `V` bytes. This is how our eq. (3) uses `#IOtask` (spec 02 leaves the exact form OPEN;
/// "≈ td0·(n+1)" with equal splits); without it, `#IOtask` is not read.
pub fn contending_bytes(node: &NodeState, split_bytes: u64, cap_by_io_tasks: bool) -> f64 {
    if cap_by_io_tasks {
        node.total_io_bytes
            .min(f64::from(node.io_tasks) * split_bytes as f64)
    } else {
        node.total_io_bytes
    }
}

/// The speed weight of the accelerator a GPU task of `app` would get on `node` now (the first free
/// device of its kind; 1.0 if none is free).
pub fn free_device_speed(app: &Application, node: &NodeState) -> f64 {
    let kind = app.gpu.as_ref().and_then(|g| g.kind.as_deref());
    node.device_free
        .iter()
        .zip(&node.node.accelerators)
        .find(|(free, acc)| **free && kind.is_none_or(|k| acc.kind == k))
        .map_or(1.0, |(_, acc)| acc.speed)
}

/// A GPU task of `app` alone on `node`'s next free device and disk:
/// `tpg0/speed + tdcg + max(tdg0, V/BW)` — eq. (2) and (3) with nothing else reading, so that a
/// slow device or a slow disk does not look like contention.
pub fn gpu_time_alone(app: &Application, node: &NodeState) -> Option<f64> {
    let gpu = app.gpu.as_ref()?;
    let read = read_time(
        gpu.read as f64,
        0.0,
        app.split_bytes,
        node.node.disk_read_bw,
    );
    Some(gpu.compute as f64 / free_device_speed(app, node) + gpu.copy as f64 + read)
}

/// Eq. (2) for a GPU task started now on `node`: `tpg0/speed + tdcg + tdg`. `None` without a GPU
/// variant. `cap_by_io_tasks`: see [`contending_bytes`].
pub fn gpu_task_time(app: &Application, node: &NodeState, cap_by_io_tasks: bool) -> Option<f64> {
    let gpu = app.gpu.as_ref()?;
    let speed = node
        .device_free
        .iter()
        .zip(&node.node.accelerators)
        .find(|(free, acc)| **free && gpu.kind.as_deref().is_none_or(|k| acc.kind == k))
        .map_or(1.0, |(_, acc)| acc.speed);
    let read = read_time(
        gpu.read as f64,
        contending_bytes(node, app.split_bytes, cap_by_io_tasks),
        app.split_bytes,
        node.node.disk_read_bw,
    );
    Some(gpu.compute as f64 / speed + gpu.copy as f64 + read)
}

/// Eq. (2) for a CPU task started now on `node`: `tpc0/core_speed + tdc`. `None` without a CPU
/// variant. `cap_by_io_tasks`: see [`contending_bytes`].
pub fn cpu_task_time(app: &Application, node: &NodeState, cap_by_io_tasks: bool) -> Option<f64> {
    let cpu = app.cpu.as_ref()?;
    let read = read_time(
        cpu.read as f64,
        contending_bytes(node, app.split_bytes, cap_by_io_tasks),
        app.split_bytes,
        node.node.disk_read_bw,
    );
    Some(cpu.compute as f64 / node.node.core_speed + read)
}

/// `T_k^GPU`: mean GPU task time when `k` GPU tasks of this application run together on `node`
/// (they share the disk, so each reads in `max(tdg0, k·V/BW)`).
pub fn gpu_time_with_k(app: &Application, k: u32, node: &Node) -> Option<f64> {
    let gpu = app.gpu.as_ref()?;
    let speed = node.accelerators.first().map_or(1.0, |a| a.speed);
    let read = read_time(
        gpu.read as f64,
        0.0,
        app.split_bytes.saturating_mul(u64::from(k.max(1))),
        node.disk_read_bw,
    );
    Some(gpu.compute as f64 / speed + gpu.copy as f64 + read)
}

/// Eq. (4), RECONSTRUCTED: GPU affinity `T_CPU_base / T_g^GPU` with `g` the node's GPU count —
/// the speedup under full GPU occupancy. A GPU-only application has infinite affinity (GPUs are all
/// it can use); an application without a GPU variant has none.
pub fn gpu_affinity(app: &AppState, node: &Node) -> Option<f64> {
    let g = node.accelerators.len() as u32;
    let t_g = gpu_time_with_k(&app.app, g, node)?;
    Some(match app.app.cpu_base_time() {
        Some(cpu) => cpu as f64 / t_g,
        None => f64::INFINITY,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{AppId, NodeId, SchedulerView};
    use crate::testkit::{app, node};

    /// A profile measured on a 128 MiB/s disk (1 GiB read in 8 s) on a node whose disk reads
    /// 64 MiB/s: the task alone there reads for 16 s, and that — not the profile's 8 s — is what
    /// its predicted delay is measured against, so an idle slow disk predicts a delay of 1.0.
    #[test]
    fn a_gpu_task_alone_reads_at_its_own_disks_speed() {
        let mut view = SchedulerView::new();
        let id = view
            .add_node(
                node("slow")
                    .cores(4)
                    .gpus(1, "g")
                    .disk_mib_s(64.0)
                    .build(NodeId(0)),
            )
            .unwrap();
        let a = app("knn")
            .split_mib(1024)
            .gpu(1.0, 0.5, 8.0)
            .build(AppId(0));
        let n = view.node(id);
        let alone = gpu_time_alone(&a, n).unwrap();
        assert!((alone - 17.5e9).abs() < 1.0, "{alone}");
        let predicted = gpu_task_time(&a, n, true).unwrap();
        assert!((predicted / alone - 1.0).abs() < 1e-9);
    }
}
