//! Resource detection: cores, memory and disks (sysinfo), NVIDIA GPUs (NVML, loaded at run time so
//! the agent builds and runs on machines without a driver). Declared values in the configuration
//! win over detected ones, which is how tests and the demo give a GPU-less machine "GPUs".

use hetsched_proto as pb;
use tracing::{debug, info};

/// What this node offers.
#[derive(Clone, Debug, PartialEq)]
pub struct Resources {
    /// Cores.
    pub cores: u32,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Accelerators.
    pub accelerators: Vec<pb::Accelerator>,
}

/// Number of cores the process may use.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Total memory in bytes.
pub fn memory_bytes() -> u64 {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    sys.total_memory()
}

/// Memory available to new work now (`MemAvailable` of `/proc/meminfo`, as sysinfo reads it).
pub fn available_memory_bytes() -> u64 {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    sys.available_memory()
}

/// Logs the mounted disks (their read bandwidth cannot be measured without disturbing them; it
/// comes from the configuration).
pub fn log_disks() {
    let disks = sysinfo::Disks::new_with_refreshed_list();
    for d in disks.list() {
        debug!(
            mount = %d.mount_point().display(),
            total = d.total_space(),
            available = d.available_space(),
            "disk"
        );
    }
    info!(disks = disks.list().len(), "disks detected");
}

/// NVIDIA GPUs through NVML, if the library and a driver are present.
pub struct Gpus {
    nvml: Option<nvml_wrapper::Nvml>,
}

impl Gpus {
    /// Tries to load NVML; without it there are no detected GPUs.
    pub fn init() -> Self {
        match nvml_wrapper::Nvml::init() {
            Ok(nvml) => Self { nvml: Some(nvml) },
            Err(e) => {
                debug!("NVML not available ({e}); no GPUs detected");
                Self { nvml: None }
            }
        }
    }

    /// The detected devices.
    pub fn devices(&self) -> Vec<pb::Accelerator> {
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        let count = nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|i| {
                let d = nvml.device_by_index(i).ok()?;
                Some(pb::Accelerator {
                    kind: d.name().unwrap_or_else(|_| "nvidia".into()),
                    memory_bytes: d.memory_info().map_or(0, |m| m.total),
                    speed: 1.0,
                })
            })
            .collect()
    }

    /// Memory used (bytes) and utilisation (percent) of each detected device, from NVML; empty
    /// without NVML (issue 11: the accelerator service's per-device state).
    pub fn device_states(&self) -> Vec<(u64, u32)> {
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        let count = nvml.device_count().unwrap_or(0);
        (0..count)
            .map(|i| {
                let Ok(d) = nvml.device_by_index(i) else {
                    return (0, 0);
                };
                (
                    d.memory_info().map_or(0, |m| m.used),
                    d.utilization_rates().map_or(0, |u| u.gpu),
                )
            })
            .collect()
    }

    /// Utilisation (percent) of each detected device.
    pub fn utilisation(&self) -> Vec<pb::GpuUtilisation> {
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        let count = nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|i| {
                let u = nvml.device_by_index(i).ok()?.utilization_rates().ok()?;
                Some(pb::GpuUtilisation {
                    device: i,
                    percent: u.gpu,
                })
            })
            .collect()
    }
}

/// Bytes read from storage by process `pid` so far (`read_bytes` of `/proc/PID/io`); 0 if
/// unreadable (the process ended, or another user's).
pub fn proc_read_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// This host's name, as an MPI launcher on another node reaches it (`/proc/sys/kernel/hostname`);
/// empty when it cannot be read or is not printable ASCII (the server then uses the node's name).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| s.len() <= 255 && s.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_default()
}
