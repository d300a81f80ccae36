//! The five applications of the HDAS paper (spec 02, "Experiment to reproduce") — **the one place
//! their profiles are defined**. Every policy runs on exactly these numbers; none is tuned per
//! policy, and HDAS's progress tolerance stays at its default.
//!
//! # Facts the paper states, and how the profiles meet them
//! | fact (paper §3) | here |
//! |---|---|
//! | slave: 6 cores, disk at most 128 MB/s, 4 Tesla C2050 | [`DISK_MIB_S`] = 128 MiB/s, 6 cores, 4 GPUs of speed 1.0 |
//! | KNN and NB GPU tasks read 1 GB | `split_mib` = 1024: an 8 s read alone |
//! | KNN / Kmeans / NB: read = 82.8 % / 24.0 % / 53.9 % of the GPU_base task | `gpu_copy_s + gpu_compute_s = read · (1 − f) / f` (a test checks it) |
//! | RS and BP read little and are compute-bound | RS: 32 MiB (0.25 s) against 12 s of kernel; BP: 4 MiB against 23.6 s |
//! | BP: 4 MB per task, GPU compute ≈ 23.6 s | `split_mib` = 4, `gpu_compute_s` = 23.6 |
//! | single-application speedups of Hadoop+ over Hadoop 1.4×–16.1× | not met for RS and BP: see below |
//!
//! # What the paper leaves open, and what we chose
//! - **Base read times are not free**: `tdc0 = tdg0 = V / BW` for the 128 MiB/s disk, so a task
//!   alone on a node reads exactly as long as its profile says (the simulator times reads with its
//!   disk model and never uses the profile's `read`).
//! - **Copy times** `tdcg`: the split over PCIe at about 3 GiB/s (0.33 s for 1 GiB). That is
//!   "negligible against `tdg`", as spec 02 says.
//! - **CPU compute times** `tpc0` (one core): KNN 85 s and NB 105 s per GiB, Kmeans 40 s per 256 MiB,
//!   RS 500 s, BP 900 s. KNN and NB are chosen so that workload C (KNN+NB) stays disk-bound under
//!   every policy: it gains about 2.8× with tasks about 3× slower than alone, as the paper reports.
//!   RS and BP are chosen so that workload I (RS+BP) gains more than 21× under all three policies.
//!   Those two facts pin the ratio of CPU to GPU time of the IO-heavy and the compute-bound
//!   applications; Kmeans sits between them.
//! - **Task counts**: each IO-heavy application alone (KNN, Kmeans, NB) keeps the cluster busy for
//!   about 22 min under Hadoop+'s allocation, each compute-bound one (RS, BP) for about 45–50 min.
//!   Mixed workloads then run from about 40 min to 2.3 h under the accelerated policies. The
//!   CPU-only baseline takes up to 36 h for the compute-bound mixes, which is what a 20× speedup
//!   means.
//! - How these values were reached: the first guess was checked against the facts above (C ≤ 2.8×,
//!   I > 21× under every policy) and against the paper's averages. Four rounds of adjustment were
//!   needed: three to task counts (each application alone for a similar time; then the IO-heavy
//!   ones at half the time of the compute-bound ones) and one to the CPU times of KNN, NB and RS.
//!   Every round applied the same profile to all four policies. `docs/results/hdas.md` records
//!   the outcome.
//!
//! # The 1.4×–16.1× single-application range
//! That range comes from the Hadoop+ paper (He et al., ICS 2015), measured on its own cluster
//! setup and inputs. It cannot also hold on the HDAS cluster alongside the HDAS paper's mixed
//! results. When every application of a workload is compute-bound, the workload's speedup over
//! CPU-only cannot exceed the best single-application speedup on the same cluster, because each
//! resource-second delivers at most the best application's rate. Yet workload I (RS+BP) gains
//! more than 21× under all three policies, and HDAS's best workload gains 31×. So RS and BP alone
//! must gain more than 21× on this cluster: 21.4× and 22.3× with the profiles below. The IO-heavy
//! applications alone gain 2.6–2.7×, inside the range. The scenario report prints these
//! single-application speedups (`single_app`).

/// Disk read bandwidth of every slave, MiB/s (the paper's "at most 128 MB/s" SATA disk).
pub const DISK_MIB_S: f64 = 128.0;
/// Slaves in the cluster.
pub const NODES: usize = 6;
/// Cores per slave (one 6-core Xeon E5-2620, hyper-threading off).
pub const CORES: u32 = 6;
/// GPUs per slave (Tesla C2050).
pub const GPUS: u32 = 4;
/// Memory per slave, bytes; never the binding resource here.
pub const NODE_MEMORY: u64 = 32 << 30;
/// Memory one task (CPU or GPU) holds, bytes.
pub const TASK_MEMORY: u64 = 1 << 30;

/// One application's profile, in the units people write them in.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct AppProfile {
    /// The application's name.
    pub name: &'static str,
    /// Input split size V, MiB (read time alone = V / [`DISK_MIB_S`]).
    pub split_mib: u64,
    /// Tasks in the application at scale 1.
    pub tasks: u32,
    /// `tpc0`: compute time of the CPU_base task on one core, seconds.
    pub cpu_compute_s: f64,
    /// `tpg0`: kernel time of the GPU_base task, seconds.
    pub gpu_compute_s: f64,
    /// `tdcg`: host↔device copy time, seconds.
    pub gpu_copy_s: f64,
}

impl AppProfile {
    /// Base read time alone, `V / BW`, seconds.
    pub fn read_s(&self) -> f64 {
        self.split_mib as f64 / DISK_MIB_S
    }
    /// GPU_base task time `tpg0 + tdcg + tdg0`, seconds.
    pub fn gpu_base_s(&self) -> f64 {
        self.gpu_compute_s + self.gpu_copy_s + self.read_s()
    }
    /// CPU_base task time `tpc0 + tdc0`, seconds.
    pub fn cpu_base_s(&self) -> f64 {
        self.cpu_compute_s + self.read_s()
    }
    /// Share of the GPU_base task spent reading.
    pub fn gpu_read_fraction(&self) -> f64 {
        self.read_s() / self.gpu_base_s()
    }
}

/// `tpg0 + tdcg` that makes the read `fraction` of a GPU task reading `split_mib` alone.
const fn rest_for_read_fraction(split_mib: u64, fraction: f64) -> f64 {
    let read = split_mib as f64 / DISK_MIB_S;
    read * (1.0 - fraction) / fraction
}

/// KNN: 1 GiB splits, read = 82.8 % of the GPU task.
const KNN_REST: f64 = rest_for_read_fraction(1024, 0.828);
/// Kmeans: 256 MiB splits, read = 24.0 % of the GPU task.
const KMEANS_REST: f64 = rest_for_read_fraction(256, 0.240);
/// NB: 1 GiB splits, read = 53.9 % of the GPU task.
const NB_REST: f64 = rest_for_read_fraction(1024, 0.539);

/// The five applications in the paper's order: KNN, Kmeans, RS, NB, BP.
pub const PROFILES: [AppProfile; 5] = [
    AppProfile {
        name: "KNN",
        split_mib: 1024,
        tasks: 900,
        cpu_compute_s: 85.0,
        gpu_copy_s: 0.33,
        gpu_compute_s: KNN_REST - 0.33,
    },
    AppProfile {
        name: "Kmeans",
        split_mib: 256,
        tasks: 2400,
        cpu_compute_s: 40.0,
        gpu_copy_s: 0.08,
        gpu_compute_s: KMEANS_REST - 0.08,
    },
    AppProfile {
        name: "RS",
        split_mib: 32,
        tasks: 4600,
        cpu_compute_s: 500.0,
        gpu_copy_s: 0.01,
        gpu_compute_s: 12.0,
    },
    AppProfile {
        name: "NB",
        split_mib: 1024,
        tasks: 800,
        cpu_compute_s: 105.0,
        gpu_copy_s: 0.33,
        gpu_compute_s: NB_REST - 0.33,
    },
    AppProfile {
        name: "BP",
        split_mib: 4,
        tasks: 2400,
        cpu_compute_s: 900.0,
        gpu_copy_s: 0.0,
        gpu_compute_s: 23.6,
    },
];
