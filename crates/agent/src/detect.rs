//! Resource detection: cores, memory and disks (sysinfo), NVIDIA GPUs (NVML, loaded at run time so
//! the agent builds and runs on machines without a driver; a GPU split by MIG as its instances,
//! [`crate::mig`]). Declared values in the configuration
//! win over detected ones, which is how tests and the demo give a GPU-less machine "GPUs".
//!
//! Memory honours the memory limit of the agent's cgroup ([`cgroup_memory`], v2 and v1): an agent
//! in a Slurm or PBS allocation (an `[[allocation]]` queue's) or in a container lives under a
//! limit far below the host's memory, and tasks placed by the host's memory would be killed by
//! the kernel's cgroup OOM killer. Cores need nothing of the kind: `available_parallelism`
//! already honours CPU quotas and affinity.

use hetsched_proto as pb;
use std::path::Path;
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
    /// What a task finds in `CUDA_VISIBLE_DEVICES` for each accelerator, in order: its
    /// declared name (`[[accelerator]] visible`, e.g. a MIG instance's UUID), else (`None`, or
    /// past the list's end) its index.
    pub device_names: crate::launch::DeviceNames,
}

/// Number of cores the process may use.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Memory in bytes: the host's (`MemTotal` of `/proc/meminfo`, as sysinfo reads it), or its
/// cgroup's limit where that is less ([`own_cgroup_memory`]).
pub fn memory_bytes() -> u64 {
    let host = host_memory().0;
    own_cgroup_memory().map_or(host, |c| host.min(c.limit))
}

/// Memory available to new work now: the host's (`MemAvailable`), or the room left under the
/// agent's cgroup's limits where that is less.
pub fn available_memory_bytes() -> u64 {
    let available = host_memory().1;
    own_cgroup_memory().map_or(available, |c| available.min(c.room))
}

/// The memory the agent offers: `declared` (the configuration's `memory`) if given, else
/// [`memory_bytes`]. Logs a cgroup limit that lowers it, so that an operator sees why `hetsched
/// nodes` shows less than the host has, and warns when `declared` is more than the limit.
pub fn node_memory(declared: Option<u64>) -> u64 {
    let (bytes, note) = offered_memory(declared, host_memory().0, own_cgroup_memory().as_ref());
    match note {
        Some(Note::Info(m)) => info!("{m}"),
        Some(Note::Warn(m)) => warn!("{m}"),
        None => {}
    }
    bytes
}

/// The host's total and available memory in bytes (`MemTotal`, `MemAvailable`).
fn host_memory() -> (u64, u64) {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    (sys.total_memory(), sys.available_memory())
}

/// What to tell the operator about the memory offered.
#[derive(Debug, PartialEq)]
enum Note {
    Info(String),
    Warn(String),
}

/// The memory offered when `memory` is `declared` or not, on a host of `host` bytes under
/// `cgroup`, and what to say about it.
fn offered_memory(
    declared: Option<u64>,
    host: u64,
    cgroup: Option<&CgroupMemory>,
) -> (u64, Option<Note>) {
    match (declared, cgroup) {
        (Some(d), Some(c)) if d > c.limit => (
            d,
            Some(Note::Warn(format!(
                "the configuration's `memory` ({}) is more than cgroup {} allows ({}): the \
                 kernel's OOM killer may kill tasks placed by it",
                gib(d),
                c.path,
                gib(c.limit)
            ))),
        ),
        (Some(d), _) => (d, None),
        (None, Some(c)) if c.limit < host => (
            c.limit,
            Some(Note::Info(format!(
                "memory limited by cgroup {} to {} (the host has {})",
                c.path,
                gib(c.limit),
                gib(host)
            ))),
        ),
        (None, _) => (host, None),
    }
}

/// `bytes` in GiB with one decimal, as the agent's log lines give memory.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// The memory limit over this process from its cgroups: the tightest of its cgroup's and its
/// ancestors' (limits are hierarchical: a parent's bounds its children).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMemory {
    /// The cgroup holding the tightest limit, as `/proc/self/cgroup` names cgroups
    /// (`/system.slice/slurmstepd.scope/job_42`).
    pub path: String,
    /// That limit, in bytes.
    pub limit: u64,
    /// Bytes that can still be used before some level's limit is reached: the least over the
    /// limited levels of limit − usage, usage less the inactive page cache (`inactive_file` of
    /// `memory.stat`), which the kernel reclaims before it kills anything — as `MemAvailable`
    /// counts reclaimable cache as available.
    pub room: u64,
}

/// The memory limit over this process, from `/proc/self/cgroup` and `/proc/self/mountinfo`;
/// `None` when there is none or they cannot be read.
pub fn own_cgroup_memory() -> Option<CgroupMemory> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    cgroup_memory(&cgroups, &mounts, Path::new("/"))
}

/// Limits at or above this mean none: cgroup v1 writes "no limit" as the largest page-aligned
/// `i64` (9223372036854771712), v2 as `max`.
const NO_LIMIT: u64 = 1 << 62;

/// The memory limit over a process whose `/proc/PID/cgroup` reads `cgroups` and whose
/// `/proc/PID/mountinfo` reads `mountinfo`, reading the cgroup files under `root` (`/`; a
/// directory holding a fake tree in tests). Both hierarchies count: cgroup v2's (`0::PATH`,
/// `memory.max`, `memory.current`) and v1's memory controller (`N:…memory…:PATH`,
/// `memory.limit_in_bytes`, `memory.usage_in_bytes`), each walked from PATH up to its mount's
/// root (inside a cgroup namespace, PATH is relative to that root, which the mount shows as `/`).
/// Anything absent, unreadable or odd counts as no limit.
pub fn cgroup_memory(cgroups: &str, mountinfo: &str, root: &Path) -> Option<CgroupMemory> {
    let mut tightest = None;
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let version = if id == "0" && controllers.is_empty() {
            Version::V2
        } else if controllers.split(',').any(|c| c == "memory") {
            Version::V1
        } else {
            continue;
        };
        if let Some(m) = hierarchy_memory(version, path, mountinfo, root) {
            tightest = Some(tighter(tightest, m));
        }
    }
    tightest
}

/// A cgroup hierarchy's version: which mount and which files hold its memory accounting.
#[derive(Clone, Copy)]
enum Version {
    V1,
    V2,
}

impl Version {
    /// Whether a mount of type `fstype` with super options `options` is this hierarchy's.
    fn is_mount(self, fstype: &str, options: &str) -> bool {
        match self {
            Version::V2 => fstype == "cgroup2",
            Version::V1 => fstype == "cgroup" && options.split(',').any(|o| o == "memory"),
        }
    }

    /// The limit, usage and `memory.stat` inactive page cache's key.
    fn files(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Version::V2 => ("memory.max", "memory.current", "inactive_file"),
            // `total_`: the cgroup's and its descendants', as its usage counts them.
            Version::V1 => (
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "total_inactive_file",
            ),
        }
    }
}

/// The tightest limit on cgroup `path` of the `version` hierarchy and its ancestors, found
/// through the first of its mounts in `mountinfo` that shows `path`.
fn hierarchy_memory(
    version: Version,
    path: &str,
    mountinfo: &str,
    root: &Path,
) -> Option<CgroupMemory> {
    if !path.starts_with('/') {
        return None;
    }
    mountinfo.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL…] - TYPE SOURCE SUPER-OPTIONS
        let dash = 6 + fields.get(6..)?.iter().position(|f| *f == "-")?;
        let (fstype, options) = (fields.get(dash + 1)?, fields.get(dash + 3)?);
        if !version.is_mount(fstype, options) {
            return None;
        }
        let (mount_root, mount_point) = (unescape(fields[3]), unescape(fields[4]));
        let rest = if mount_root == "/" {
            path
        } else {
            path.strip_prefix(mount_root.as_str())
                .filter(|r| r.is_empty() || r.starts_with('/'))?
        };
        let levels: Vec<&str> = rest
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        // A cgroup outside the mount's (or namespace's) root shows as `/../…`: not reachable.
        if levels.contains(&"..") {
            return None;
        }
        walk(
            version,
            &mount_root,
            &root.join(mount_point.trim_start_matches('/')),
            &levels,
        )
    })
}

/// The tightest limit from the cgroup `levels` below directory `base` (the mount point of the
/// hierarchy, whose root is cgroup `mount_root`) up to `base` itself.
fn walk(version: Version, mount_root: &str, base: &Path, levels: &[&str]) -> Option<CgroupMemory> {
    let (limit_file, usage_file, inactive_key) = version.files();
    let mut tightest = None;
    for depth in (0..=levels.len()).rev() {
        let dir = levels[..depth]
            .iter()
            .fold(base.to_path_buf(), |d, l| d.join(l));
        // `max`, garbage or an absent file: no limit at this level.
        let Some(limit) = read_number(&dir.join(limit_file)).filter(|&l| l < NO_LIMIT) else {
            continue;
        };
        let inactive = std::fs::read_to_string(dir.join("memory.stat"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    let (key, value) = l.split_once(' ')?;
                    (key == inactive_key).then(|| value.trim().parse::<u64>().ok())?
                })
            })
            .unwrap_or(0);
        let room = read_number(&dir.join(usage_file)).map_or(limit, |usage| {
            limit.saturating_sub(usage.saturating_sub(inactive))
        });
        let mut path = mount_root.trim_end_matches('/').to_string();
        for l in &levels[..depth] {
            path.push('/');
            path.push_str(l);
        }
        if path.is_empty() {
            path.push('/');
        }
        tightest = Some(tighter(tightest, CgroupMemory { path, limit, room }));
    }
    tightest
}

/// The tighter limit of `a` and `b` (`a` at a tie), with the least room of both.
fn tighter(a: Option<CgroupMemory>, b: CgroupMemory) -> CgroupMemory {
    match a {
        None => b,
        Some(a) => {
            let room = a.room.min(b.room);
            let mut t = if b.limit < a.limit { b } else { a };
            t.room = room;
            t
        }
    }
}

/// The decimal number a cgroup file holds; `None` for anything else (`max`, garbage, unreadable).
fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A `mountinfo` field with its octal escapes (`\040` for a space) decoded.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| {
            b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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

    /// The detected devices and their names ([`crate::mig::offered`]): each GPU of the kind
    /// [`gpu_kind`] names after its model, or, split by MIG, each of its instances.
    pub fn devices(&self) -> crate::mig::Offered {
        let Some(nvml) = &self.nvml else {
            return crate::mig::Offered::default();
        };
        let count = nvml.device_count().unwrap_or(0);
        // Listed once, and only where a GPU is in MIG mode.
        let mut listing: Option<crate::mig::Listing> = None;
        let gpus: Vec<crate::mig::PhysicalGpu> = (0..count)
            .filter_map(|i| {
                let d = nvml.device_by_index(i).ok()?;
                let model = d.name().unwrap_or_default();
                let kind = gpu_kind(&model);
                let memory_bytes = d.memory_info().map_or(0, |m| m.total);
                let uuid = d.uuid().unwrap_or_default();
                info!(
                    "GPU {i}: {model}, {:.1} GiB, of kind `{kind}`",
                    memory_bytes as f64 / f64::from(1u32 << 30)
                );
                let split = d
                    .mig_mode()
                    .is_ok_and(|m| m.current == NVML_DEVICE_MIG_ENABLE);
                let mig = split.then(|| {
                    let listing = listing.get_or_insert_with(|| match crate::mig::list() {
                        Ok(text) => crate::mig::parse_list(&text),
                        Err(e) => {
                            warn!("GPU {i} is in MIG mode, and its instances are not listed: {e}");
                            Vec::new()
                        }
                    });
                    let instances = listing
                        .iter()
                        .find(|(g, _)| !uuid.is_empty() && *g == uuid)
                        .map_or(&[][..], |(_, m)| m.as_slice());
                    instances
                        .iter()
                        .map(|(profile, mig_uuid)| {
                            let memory_bytes = nvml
                                .device_by_uuid(mig_uuid.as_str())
                                .and_then(|m| m.memory_info())
                                .map_or(0, |m| m.total);
                            info!(
                                "GPU {i}: MIG instance {profile} `{mig_uuid}`, {:.1} GiB",
                                memory_bytes as f64 / f64::from(1u32 << 30)
                            );
                            crate::mig::MigInstance {
                                profile: profile.clone(),
                                uuid: mig_uuid.clone(),
                                memory_bytes,
                            }
                        })
                        .collect()
                });
                Some(crate::mig::PhysicalGpu {
                    index: i,
                    kind,
                    memory_bytes,
                    uuid,
                    mig,
                })
            })
            .collect();
        let offered = crate::mig::offered(&gpus);
        for w in &offered.warnings {
            warn!("{w}");
        }
        offered
    }

    /// The agent's devices as NVML knows them, by the agent's index: `names` are the agent's
    /// ([`Resources::device_names`]); a named device (a MIG instance) is found by its UUID, any
    /// other by its index. No names: every device NVML lists.
    fn handles<'n>(
        &'n self,
        names: &'n [Option<String>],
    ) -> impl Iterator<Item = (u32, Option<nvml_wrapper::Device<'n>>)> + 'n {
        let count = match (&self.nvml, names.len()) {
            (None, _) => 0,
            (Some(nvml), 0) => nvml.device_count().unwrap_or(0),
            (Some(_), n) => u32::try_from(n).unwrap_or(u32::MAX),
        };
        (0..count).map(move |i| {
            let d = self
                .nvml
                .as_ref()
                .and_then(|nvml| match names.get(i as usize) {
                    Some(Some(uuid)) => nvml.device_by_uuid(uuid.as_str()).ok(),
                    _ => nvml.device_by_index(i).ok(),
                });
            (i, d)
        })
    }

    /// Memory used (bytes) and utilisation (percent) of each of the agent's devices (`names`:
    /// [`Gpus::handles`]), from NVML; `None` for one NVML does not know, and empty without NVML
    /// (issue 11: the accelerator service's per-device state). A MIG instance has no
    /// utilisation of its own in NVML: 0.
    pub fn device_states(&self, names: &[Option<String>]) -> Vec<Option<(u64, u32)>> {
        self.handles(names)
            .map(|(_, d)| {
                let d = d?;
                Some((
                    d.memory_info().map_or(0, |m| m.used),
                    d.utilization_rates().map_or(0, |u| u.gpu),
                ))
            })
            .collect()
    }

    /// Utilisation (percent) of each of the agent's devices NVML gives one for (`names`:
    /// [`Gpus::handles`]; not a MIG instance).
    pub fn utilisation(&self, names: &[Option<String>]) -> Vec<pb::GpuUtilisation> {
        self.handles(names)
            .filter_map(|(i, d)| {
                let u = d?.utilization_rates().ok()?;
                Some(pb::GpuUtilisation {
                    device: i,
                    percent: u.gpu,
                })
            })
            .collect()
    }

    /// The GPU memory each process uses on device `device` (NVML's index), as (pid, bytes): its
    /// compute and graphics processes, a process in both once (at its larger figure). Empty
    /// without NVML or the device; a process whose figure NVML does not give is left out.
    pub fn process_memory(&self, device: u32) -> Vec<(u32, u64)> {
        self.nvml
            .as_ref()
            .and_then(|n| n.device_by_index(device).ok())
            .map_or_else(Vec::new, |d| processes_on(&d))
    }

    /// As [`Gpus::process_memory`], for the device NVML knows by `uuid` (a `GPU-…` or a MIG
    /// instance's `MIG-…` UUID, as `[[accelerator]] visible` names it); empty where NVML does
    /// not know it.
    pub fn process_memory_by_uuid(&self, uuid: &str) -> Vec<(u32, u64)> {
        self.nvml
            .as_ref()
            .and_then(|n| n.device_by_uuid(uuid).ok())
            .map_or_else(Vec::new, |d| processes_on(&d))
    }
}

/// The GPU memory each process uses on `d`, as (pid, bytes): its compute and graphics
/// processes, a process in both once (at its larger figure).
fn processes_on(d: &nvml_wrapper::Device) -> Vec<(u32, u64)> {
    use nvml_wrapper::enums::device::UsedGpuMemory;
    let mut used: Vec<(u32, u64)> = Vec::new();
    let lists = [
        d.running_compute_processes(),
        d.running_graphics_processes(),
    ];
    for p in lists.into_iter().flat_map(Result::unwrap_or_default) {
        let UsedGpuMemory::Used(bytes) = p.used_gpu_memory else {
            continue;
        };
        match used.iter_mut().find(|(pid, _)| *pid == p.pid) {
            Some(seen) => seen.1 = seen.1.max(bytes),
            None => used.push((p.pid, bytes)),
        }
    }
    used
}

/// NVML's `NVML_DEVICE_MIG_ENABLE`: the current MIG mode (`Device::mig_mode`) of a GPU split
/// into MIG instances.
const NVML_DEVICE_MIG_ENABLE: u32 = 1;

/// Longest kind [`gpu_kind`] gives: the server's bound on an accelerator kind.
pub const MAX_KIND: usize = 64;

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
    use hetsched_core::testkit::ScratchDir;

    const GIB: u64 = 1 << 30;

    /// A fresh directory holding `files` (path below it, contents): a fake `/`.
    fn tree(name: &str, files: &[(&str, String)]) -> ScratchDir {
        let dir = ScratchDir::new("cgroup", name);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().expect("below the tree")).expect("tree directory");
            std::fs::write(p, text).expect("tree file");
        }
        dir
    }

    /// A host's mountinfo with cgroup v2 at /sys/fs/cgroup, among other mounts.
    const V2_MOUNTS: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
31 24 0:28 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    const STEP: &str = "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0";

    fn n(bytes: u64) -> String {
        format!("{bytes}\n")
    }

    #[test]
    fn a_slurm_steps_memory_is_its_jobs_limit_found_on_a_parent_cgroup() {
        let job = "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42";
        let root = tree(
            "v2-parent",
            &[
                // The root of the hierarchy has no memory.max; the step's levels have none.
                (&format!("{job}/memory.max"), n(4 * GIB)),
                (&format!("{job}/memory.current"), n(GIB)),
                (&format!("{job}/step_0/memory.max"), "max\n".into()),
                (&format!("{job}/step_0/memory.current"), n(GIB / 2)),
                (&format!("{job}/step_0/user/memory.max"), "max\n".into()),
                (
                    &format!("{job}/step_0/user/task_0/memory.max"),
                    "max\n".into(),
                ),
            ],
        );
        let cgroups = format!("0::{STEP}\n");
        assert_eq!(
            cgroup_memory(&cgroups, V2_MOUNTS, &root),
            Some(CgroupMemory {
                path: "/system.slice/slurmstepd.scope/job_42".into(),
                limit: 4 * GIB,
                room: 3 * GIB,
            })
        );
    }

    #[test]
    fn the_tighter_of_two_levels_limits_and_each_levels_usage_bounds_the_room() {
        let job = "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42";
        let root = tree(
            "v2-two",
            &[
                // The job allows 8 GiB, of which other steps use 7.5 GiB (1 GiB of it inactive
                // page cache, which the kernel reclaims first); this step is limited to 2 GiB
                // and uses 1 GiB.
                (&format!("{job}/memory.max"), n(8 * GIB)),
                (&format!("{job}/memory.current"), n(15 * GIB / 2)),
                (
                    &format!("{job}/memory.stat"),
                    format!("anon 100\ninactive_file {GIB}\nactive_file 5\n"),
                ),
                (&format!("{job}/step_0/memory.max"), n(2 * GIB)),
                (&format!("{job}/step_0/memory.current"), n(GIB)),
            ],
        );
        let cgroups = format!("0::{STEP}\n");
        let m = cgroup_memory(&cgroups, V2_MOUNTS, &root).expect("a limit");
        assert_eq!(m.path, "/system.slice/slurmstepd.scope/job_42/step_0");
        assert_eq!(m.limit, 2 * GIB);
        // The step has 1 GiB left, the job 8 − 6.5 = 1.5 GiB: the step's room is the least.
        assert_eq!(m.room, GIB);
        // With the job nearly full, the job's room is the least.
        std::fs::write(root.join(format!("{job}/memory.stat")), "inactive_file 0\n")
            .expect("rewriting a tree file");
        let m = cgroup_memory(&cgroups, V2_MOUNTS, &root).expect("a limit");
        assert_eq!((m.limit, m.room), (2 * GIB, GIB / 2));
        // A step allowed more than its job is still bound by the job's limit.
        std::fs::write(root.join(format!("{job}/step_0/memory.max")), n(16 * GIB))
            .expect("rewriting a tree file");
        let m = cgroup_memory(&cgroups, V2_MOUNTS, &root).expect("a limit");
        assert_eq!(m.path, "/system.slice/slurmstepd.scope/job_42");
        assert_eq!((m.limit, m.room), (8 * GIB, GIB / 2));
    }

    #[test]
    fn max_everywhere_is_no_limit() {
        let root = tree(
            "v2-max",
            &[
                ("sys/fs/cgroup/memory.max", "max\n".into()),
                ("sys/fs/cgroup/user.slice/memory.max", "max\n".into()),
                ("sys/fs/cgroup/user.slice/memory.current", n(GIB)),
                (
                    "sys/fs/cgroup/user.slice/session-1.scope/memory.max",
                    "max\n".into(),
                ),
            ],
        );
        assert_eq!(
            cgroup_memory("0::/user.slice/session-1.scope\n", V2_MOUNTS, &root),
            None
        );
    }

    #[test]
    fn cgroup_v1s_memory_controller_limits_even_joined_with_others() {
        let mounts = "\
30 24 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755
35 30 0:32 / /sys/fs/cgroup/cpu,memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,memory
36 30 0:33 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
41 30 0:38 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
";
        let cgroups = "\
5:pids:/slurm/uid_1000/job_7
4:cpu,memory:/slurm/uid_1000/job_7/step_batch
0::/
";
        let base = "sys/fs/cgroup/cpu,memory/slurm";
        let root = tree(
            "v1",
            &[
                // v1 writes "no limit" as the largest page-aligned i64.
                (
                    &format!("{base}/memory.limit_in_bytes"),
                    "9223372036854771712\n".into(),
                ),
                (
                    &format!("{base}/uid_1000/memory.limit_in_bytes"),
                    "9223372036854771712\n".into(),
                ),
                (
                    &format!("{base}/uid_1000/job_7/memory.limit_in_bytes"),
                    n(6 * GIB),
                ),
                (
                    &format!("{base}/uid_1000/job_7/memory.usage_in_bytes"),
                    n(3 * GIB),
                ),
                (
                    &format!("{base}/uid_1000/job_7/memory.stat"),
                    format!("inactive_file 0\ntotal_inactive_file {GIB}\n"),
                ),
                (
                    &format!("{base}/uid_1000/job_7/step_batch/memory.limit_in_bytes"),
                    "9223372036854771712\n".into(),
                ),
                // The (hybrid host's) unified hierarchy has no memory controller: no files.
            ],
        );
        assert_eq!(
            cgroup_memory(cgroups, mounts, &root),
            Some(CgroupMemory {
                path: "/slurm/uid_1000/job_7".into(),
                limit: 6 * GIB,
                room: 4 * GIB,
            })
        );
    }

    #[test]
    fn in_a_cgroup_namespace_the_limit_is_at_the_mounts_root() {
        // A container or pod with its own cgroup namespace: its cgroup is `/`, the mount root.
        let mounts = "\
700 650 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
705 700 0:55 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate
";
        let root = tree(
            "ns",
            &[
                ("sys/fs/cgroup/memory.max", n(512 << 20)),
                ("sys/fs/cgroup/memory.current", n(100 << 20)),
            ],
        );
        assert_eq!(
            cgroup_memory("0::/\n", mounts, &root),
            Some(CgroupMemory {
                path: "/".into(),
                limit: 512 << 20,
                room: 412 << 20,
            })
        );
    }

    #[test]
    fn a_mount_of_the_processs_own_cgroup_is_walked_only_up_to_that_cgroup() {
        // Docker on cgroup v1 without a namespace: the container sees its cgroup's directory
        // mounted as the hierarchy, whose root is the cgroup itself; with a space in the mount
        // point, which mountinfo escapes.
        let mounts = "\
35 30 0:32 /docker/abc /sys/fs/cgroup/mem\\040ory ro,nosuid - cgroup cgroup rw,memory
";
        let root = tree(
            "docker",
            &[
                ("sys/fs/cgroup/mem ory/memory.limit_in_bytes", n(2 * GIB)),
                ("sys/fs/cgroup/mem ory/memory.usage_in_bytes", n(GIB)),
                // Outside the container: not reachable, and not the container's.
                ("sys/fs/cgroup/memory.limit_in_bytes", n(GIB / 4)),
            ],
        );
        assert_eq!(
            cgroup_memory("4:memory:/docker/abc\n", mounts, &root),
            Some(CgroupMemory {
                path: "/docker/abc".into(),
                limit: 2 * GIB,
                room: GIB,
            })
        );
        // A cgroup the mount does not show is not looked for elsewhere.
        assert_eq!(
            cgroup_memory("4:memory:/docker/other\n", mounts, &root),
            None
        );
    }

    #[test]
    fn garbage_or_missing_cgroup_files_mean_no_limit() {
        let root = tree(
            "garbage",
            &[
                ("sys/fs/cgroup/a/memory.max", "lots\n".into()),
                ("sys/fs/cgroup/b/memory.max", "-5\n".into()),
                ("sys/fs/cgroup/c/memory.max", "".into()),
                ("sys/fs/cgroup/memory.max", n(GIB)),
                ("etc/memory.max", n(GIB)),
            ],
        );
        for (cgroups, mounts) in [
            ("0::/a\n", V2_MOUNTS),
            ("0::/b\n", V2_MOUNTS),
            ("0::/c/d/e\n", ""),
            ("", V2_MOUNTS),
            ("garbage\n::\n0:\n:::\n\u{0}\n", V2_MOUNTS),
            // Not absolute, or above the root: the limit at the mount point is not its own.
            ("0::a\n", V2_MOUNTS),
            ("0::/../../etc\n", V2_MOUNTS),
            (
                "0::/nowhere\n",
                "garbage\n31 24 0:28\n1 2 3 4 5 6 -\n- - - - - - - - cgroup2\n",
            ),
            (
                "0::/nowhere\n",
                "31 24 0:28 / /sys/fs/cgroup\\7 rw - cgroup2 cgroup2 rw\n",
            ),
        ] {
            let m = cgroup_memory(cgroups, mounts, &root);
            assert!(
                m.is_none() || m.as_ref().is_some_and(|m| m.path == "/"),
                "{cgroups:?} {mounts:?}: {m:?}"
            );
            assert_ne!(m.map(|m| m.path), Some("/etc".to_string()), "{cgroups:?}");
        }
        // Missing files: no hierarchy at all.
        let empty = tree("missing", &[]);
        assert_eq!(
            cgroup_memory(&format!("0::{STEP}\n"), V2_MOUNTS, &empty),
            None
        );
    }

    #[test]
    fn a_cgroup_limit_lowers_the_memory_offered_and_a_larger_declared_one_is_warned_of() {
        let job = CgroupMemory {
            path: "/slurm/job_7".into(),
            limit: 4 * GIB,
            room: 3 * GIB,
        };
        let (bytes, note) = offered_memory(None, 512 * GIB, Some(&job));
        assert_eq!(bytes, 4 * GIB);
        assert_eq!(
            note,
            Some(Note::Info(
                "memory limited by cgroup /slurm/job_7 to 4.0 GiB (the host has 512.0 GiB)".into()
            ))
        );
        // Declared wins, warned of when the cgroup allows less.
        let (bytes, note) = offered_memory(Some(64 * GIB), 512 * GIB, Some(&job));
        assert_eq!(bytes, 64 * GIB);
        let Some(Note::Warn(w)) = note else {
            panic!("{note:?}")
        };
        assert!(
            w.contains("`memory` (64.0 GiB)") && w.contains("/slurm/job_7 allows (4.0 GiB)"),
            "{w}"
        );
        assert_eq!(
            offered_memory(Some(2 * GIB), 512 * GIB, Some(&job)),
            (2 * GIB, None)
        );
        // No limit, or one above the host's memory: the host's, silently.
        assert_eq!(offered_memory(None, 512 * GIB, None), (512 * GIB, None));
        assert_eq!(offered_memory(None, 2 * GIB, Some(&job)), (2 * GIB, None));
    }

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
