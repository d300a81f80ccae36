//! Resource detection: cores, memory and disks (sysinfo), NVIDIA GPUs (NVML, loaded at run time so
//! the agent builds and runs on machines without a driver). Declared values in the configuration
//! win over detected ones, which is how tests and the demo give a GPU-less machine "GPUs".

use hetsched_proto as pb;
use tracing::{debug, info, warn};

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
    /// Tries to load NVML; without it there are no detected GPUs. A machine with an NVIDIA
    /// driver loaded (`/proc/driver/nvidia`) whose NVML does not load is warned about: its GPUs
    /// would otherwise go unseen without a word.
    pub fn init() -> Self {
        match nvml_wrapper::Nvml::init() {
            Ok(nvml) => Self { nvml: Some(nvml) },
            Err(e) if std::path::Path::new("/proc/driver/nvidia").exists() => {
                // Once: the agent loads NVML for its devices and again for their utilisation.
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    warn!(
                        "an NVIDIA driver is loaded but NVML did not load ({e}): no GPUs detected; \
                     put libnvidia-ml.so.1 on the loader's path, or declare the devices with \
                     [[accelerator]] in the agent's configuration"
                    )
                });
                Self { nvml: None }
            }
            Err(e) => {
                debug!("NVML not available ({e}); no GPUs detected");
                Self { nvml: None }
            }
        }
    }

    /// The detected devices, each of the kind [`gpu_kind`] names after its model.
    pub fn devices(&self) -> Vec<pb::Accelerator> {
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        let count = nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|i| {
                let d = nvml.device_by_index(i).ok()?;
                let model = d.name().unwrap_or_default();
                let kind = gpu_kind(&model);
                let memory_bytes = d.memory_info().map_or(0, |m| m.total);
                info!(
                    "GPU {i}: {model}, {:.1} GiB, of kind `{kind}`",
                    memory_bytes as f64 / f64::from(1u32 << 30)
                );
                Some(pb::Accelerator {
                    kind,
                    memory_bytes,
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

/// Longest kind [`gpu_kind`] gives: the server's bound on an accelerator kind.
const MAX_KIND: usize = 64;

/// The accelerator kind of an NVIDIA device named `model` by NVML, as jobs name it (`gpu.kind`,
/// `--gpu-kind`; Slurm's GRES types): the model in lower case without the vendor's brand words,
/// cut at its first `-` — `NVIDIA H200` → `h200`, `NVIDIA A100-SXM4-80GB` → `a100`,
/// `NVIDIA H100 80GB HBM3` → `h100`, `Tesla V100-SXM2-16GB` → `v100`; a series word is kept
/// with its number, `NVIDIA GeForce RTX 4090` → `rtx-4090`. NVML's name holds spaces, which a
/// kind may not (the server refused such a registration: a GPU node's agent could not start
/// without its devices declared), and a job could not have named it. `nvidia` when nothing of
/// the name is left.
pub fn gpu_kind(model: &str) -> String {
    const BRANDS: [&str; 4] = ["nvidia", "tesla", "geforce", "quadro"];
    const SERIES: [&str; 3] = ["rtx", "gtx", "titan"];
    let words: Vec<String> = model
        .split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
                .collect::<String>()
                .to_ascii_lowercase()
        })
        .filter(|w| !w.is_empty() && !BRANDS.contains(&w.as_str()))
        .collect();
    let kind = match words.as_slice() {
        [] => String::new(),
        [series, number, ..] if SERIES.contains(&series.as_str()) => {
            format!("{series}-{}", cut(number))
        }
        [first, ..] => cut(first).to_string(),
    };
    let kind: String = kind.chars().take(MAX_KIND).collect();
    if kind.is_empty() || kind.starts_with(['-', '.']) {
        "nvidia".to_string()
    } else {
        kind
    }
}

/// `word` up to its first `-` (a model's form factor and memory follow it: `a100-sxm4-80gb`).
fn cut(word: &str) -> &str {
    word.split('-').find(|p| !p.is_empty()).unwrap_or(word)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpus_kind_is_its_model_as_jobs_name_it() {
        for (model, kind) in [
            ("NVIDIA H200", "h200"),
            ("NVIDIA H100 80GB HBM3", "h100"),
            ("NVIDIA H100 PCIe", "h100"),
            ("NVIDIA A100-SXM4-80GB", "a100"),
            ("NVIDIA A100 80GB PCIe", "a100"),
            ("Tesla V100-SXM2-16GB", "v100"),
            ("Tesla T4", "t4"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA A10G", "a10g"),
            ("NVIDIA GH200 480GB", "gh200"),
            ("NVIDIA GeForce RTX 4090", "rtx-4090"),
            ("NVIDIA RTX A6000", "rtx-a6000"),
            ("Quadro RTX 8000", "rtx-8000"),
            ("NVIDIA TITAN V", "titan-v"),
            ("NVIDIA", "nvidia"),
            ("", "nvidia"),
            ("NVIDIA ---", "nvidia"),
        ] {
            assert_eq!(gpu_kind(model), kind, "{model}");
        }
    }

    #[test]
    fn every_kind_is_one_a_registration_and_a_job_accept() {
        for model in [
            "NVIDIA H200",
            "NVIDIA GeForce RTX 4090",
            "weird \u{7} name / with: punctuation",
            &"x".repeat(300),
            "NVIDIA -a100",
        ] {
            let kind = gpu_kind(model);
            assert!(kind.len() <= MAX_KIND, "{kind}");
            hetsched_core::model::cluster::check_attribute(&kind)
                .unwrap_or_else(|e| panic!("{model}: {e}"));
            assert!(
                kind.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
                "{kind}"
            );
        }
    }
}
