//! MIG instances: which a GPU split by NVIDIA's Multi-Instance GPU holds, and what the agent
//! offers of the detected GPUs when some are split.
//!
//! A CUDA program sees a GPU in MIG mode only through its instances' UUIDs (`MIG-…` in
//! `CUDA_VISIBLE_DEVICES`); handed the GPU's index it sees no device. So a split GPU is offered
//! as its instances, one device each, named by UUID, of a kind per profile (`h100-1g.10gb`) so
//! that a job asks for the slice it needs (`gpu.kind`), and of the speed of its share.
//!
//! The instances are listed by `nvidia-smi -L` ([`parse_list`]): the NVML wrapper the agent uses
//! does not enumerate MIG devices, and its C calls would take `unsafe` code, which the workspace
//! forbids. NVML then answers by each instance's UUID (its memory). Only a GPU NVML reports in
//! MIG mode is listed, so `nvidia-smi` runs only on such a machine.

use hetsched_proto as pb;
use std::time::{Duration, Instant};

/// One physical GPU as NVML describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct PhysicalGpu {
    /// NVML's index.
    pub index: u32,
    /// Its accelerator kind ([`crate::detect::gpu_kind`] of its model).
    pub kind: String,
    /// Its memory, bytes.
    pub memory_bytes: u64,
    /// Its `GPU-…` UUID; empty where NVML gave none.
    pub uuid: String,
    /// `None`: not in MIG mode. `Some`: in MIG mode, with these instances (none: no instance
    /// was created, or they could not be listed).
    pub mig: Option<Vec<MigInstance>>,
}

/// One MIG instance of a GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct MigInstance {
    /// Its profile as `nvidia-smi -L` names it (`1g.10gb`, `1c.3g.40gb`, `1g.10gb+me`).
    pub profile: String,
    /// Its UUID (`MIG-…`; `MIG-GPU-…/1/0` on drivers before R470): what CUDA accepts.
    pub uuid: String,
    /// Its memory, bytes (NVML's, by its UUID); 0 where NVML does not know it.
    pub memory_bytes: u64,
}

/// What the agent offers of the detected GPUs: a device each, and what a task given it finds
/// in `CUDA_VISIBLE_DEVICES` (`None`: its index), in the same order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Offered {
    /// The devices.
    pub accelerators: Vec<pb::Accelerator>,
    /// Their names ([`crate::detect::Resources::device_names`]).
    pub names: Vec<Option<String>>,
    /// What to warn the operator of.
    pub warnings: Vec<String>,
}

/// The devices `gpus` offer. Without a GPU in MIG mode, every GPU by its index, as NVML
/// numbers them (what CUDA numbers them too with `CUDA_DEVICE_ORDER=PCI_BUS_ID`). With one, the
/// agent's indices no longer follow NVML's, so every device is named by its UUID: each
/// instance of a split GPU (kind `{gpu kind}-{profile}`, its memory, speed its share of the
/// GPU's memory), each other GPU as itself. A GPU in MIG mode without instances offers nothing
/// and is warned of; so is a GPU whose UUID NVML did not give on such a machine.
pub fn offered(gpus: &[PhysicalGpu]) -> Offered {
    let mut out = Offered::default();
    let split = gpus.iter().any(|g| g.mig.is_some());
    for g in gpus {
        let whole = pb::Accelerator {
            kind: g.kind.clone(),
            memory_bytes: g.memory_bytes,
            speed: 1.0,
        };
        match &g.mig {
            None if !split => {
                out.accelerators.push(whole);
                out.names.push(None);
            }
            None => match name_problem(&g.uuid) {
                Some(problem) => out.warnings.push(format!(
                    "GPU {}: beside a GPU in MIG mode a device is named by its UUID, and NVML's \
                     ({problem}) cannot be one: not offered; declare the devices with \
                     [[accelerator]] visible",
                    g.index
                )),
                None => {
                    out.accelerators.push(whole);
                    out.names.push(Some(g.uuid.clone()));
                }
            },
            Some(instances) if instances.is_empty() => out.warnings.push(format!(
                "GPU {} is in MIG mode and has no MIG instances: it offers no device (a task \
                 given the GPU itself sees none); create instances (`nvidia-smi mig -cgi … -C`) \
                 and restart the agent, or declare the devices with [[accelerator]]",
                g.index
            )),
            Some(instances) => {
                for m in instances {
                    if let Some(problem) = name_problem(&m.uuid) {
                        out.warnings.push(format!(
                            "GPU {}: MIG instance {}: its UUID ({problem}) cannot name it in \
                             CUDA_VISIBLE_DEVICES: not offered",
                            g.index, m.profile
                        ));
                        continue;
                    }
                    if out.names.contains(&Some(m.uuid.clone())) {
                        out.warnings.push(format!(
                            "GPU {}: MIG instance `{}` is listed twice: offered once",
                            g.index, m.uuid
                        ));
                        continue;
                    }
                    let speed = if g.memory_bytes > 0 && m.memory_bytes > 0 {
                        (m.memory_bytes as f64 / g.memory_bytes as f64).min(1.0)
                    } else {
                        1.0
                    };
                    out.accelerators.push(pb::Accelerator {
                        kind: instance_kind(&g.kind, &m.profile),
                        memory_bytes: m.memory_bytes,
                        speed: (speed * 1000.0).round() / 1000.0,
                    });
                    out.names.push(Some(m.uuid.clone()));
                }
            }
        }
    }
    out
}

/// Why `uuid` cannot name a device in `CUDA_VISIBLE_DEVICES`: the rules a declared name follows
/// (`[[accelerator]] visible`), so that nothing a listing prints puts a comma in the variable.
fn name_problem(uuid: &str) -> Option<String> {
    hetsched_core::input::cluster::visible_name_problem(uuid)
        .map(|p| format!("`{}`: {p}", uuid.escape_debug()))
}

/// The kind of a MIG instance of `profile` on a GPU of kind `gpu`: `h100` and `1g.10gb` give
/// `h100-1g.10gb` (Slurm's GRES types name MIG slices the same way); a `+` (`1g.10gb+me`) becomes
/// `-`, and what a kind may not hold is dropped. Within the server's bound on a kind.
pub fn instance_kind(gpu: &str, profile: &str) -> String {
    let profile: String = profile
        .chars()
        .map(|c| {
            if c == '+' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    let kind = if profile.is_empty() {
        format!("{gpu}-mig")
    } else {
        format!("{gpu}-{profile}")
    };
    kind.chars().take(crate::detect::MAX_KIND).collect()
}

/// Each GPU's UUID with its MIG instances, as (profile, instance UUID) ([`parse_list`]).
pub type Listing = Vec<(String, Vec<(String, String)>)>;

/// The MIG instances of each GPU in `nvidia-smi -L`'s listing, by the GPU's UUID, as (profile,
/// instance UUID) in the listing's order:
///
/// ```text
/// GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-…)
///   MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-…)
/// ```
///
/// Lines of another shape are skipped (a future listing's extra lines must not hide the ones
/// known); an instance line before any GPU line is too.
pub fn parse_list(text: &str) -> Listing {
    let mut gpus: Listing = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(uuid) = uuid_of(line) else {
            continue;
        };
        if line.starts_with("GPU ") {
            gpus.push((uuid.to_string(), Vec::new()));
        } else if let Some(rest) = line.strip_prefix("MIG ") {
            let profile = rest.split_whitespace().next().unwrap_or_default();
            if let Some((_, instances)) = gpus.last_mut() {
                instances.push((profile.to_string(), uuid.to_string()));
            }
        }
    }
    gpus
}

/// The UUID a listing line names (`(UUID: X)`).
fn uuid_of(line: &str) -> Option<&str> {
    let start = line.find("(UUID: ")? + "(UUID: ".len();
    let end = start + line[start..].find(')')?;
    Some(line[start..end].trim()).filter(|u| !u.is_empty())
}

/// How long `nvidia-smi -L` may take (it hangs on a wedged driver; the agent's start must not).
const LIST_TIMEOUT: Duration = Duration::from_secs(20);

/// `nvidia-smi -L`'s listing ([`parse_list`]), or why there is none.
pub fn list() -> Result<String, String> {
    list_from(std::path::Path::new("nvidia-smi"), LIST_TIMEOUT)
}

/// `program -L`'s output if it succeeds within `timeout` (it is killed after it).
fn list_from(program: &std::path::Path, timeout: Duration) -> Result<String, String> {
    let mut child = std::process::Command::new(program)
        .arg("-L")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("running nvidia-smi -L: {e}"))?;
    // Read on a thread, so that a listing larger than the pipe's buffer does not stall the
    // child while this one waits for it to exit.
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stdout.as_mut() {
            let _ = std::io::Read::read_to_string(&mut std::io::Read::take(s, 1 << 20), &mut text);
        }
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "nvidia-smi -L did not end within {} s",
                    timeout.as_secs_f64()
                ));
            }
            Err(e) => return Err(format!("waiting for nvidia-smi -L: {e}")),
        }
    };
    let text = reader.join().unwrap_or_default();
    if status.success() {
        Ok(text)
    } else {
        Err(format!("nvidia-smi -L failed ({status})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    const GIB: u64 = 1 << 30;

    /// `nvidia-smi -L` on a node with two A100s, the first split (R470 and later).
    const LISTING: &str = "\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 1g.5gb      Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)
  MIG 1g.5gb+me   Device  2: (UUID: MIG-1d4e0a6c-7b2f-5c1e-9a3d-2f4b6c8d0e1f)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b)
";

    #[test]
    fn the_listing_gives_each_gpus_instances_in_order() {
        let gpus = parse_list(LISTING);
        assert_eq!(
            gpus,
            vec![
                (
                    "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77".to_string(),
                    vec![
                        (
                            "3g.20gb".to_string(),
                            "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f".to_string()
                        ),
                        (
                            "1g.5gb".to_string(),
                            "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb".to_string()
                        ),
                        (
                            "1g.5gb+me".to_string(),
                            "MIG-1d4e0a6c-7b2f-5c1e-9a3d-2f4b6c8d0e1f".to_string()
                        ),
                    ]
                ),
                (
                    "GPU-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b".to_string(),
                    vec![]
                ),
            ]
        );
    }

    #[test]
    fn an_older_drivers_listing_and_stray_lines_are_read_too() {
        // R450's instance UUIDs, a compute-instance profile, and lines of no known shape.
        let text = "\
  MIG 1g.5gb Device 0: (UUID: MIG-orphan)
GPU 0: A100-SXM4-40GB (UUID: GPU-aaaa)
  MIG 1c.3g.20gb Device 0: (UUID: MIG-GPU-aaaa/1/0)
  something new: (UUID: )
No devices were found
";
        assert_eq!(
            parse_list(text),
            vec![(
                "GPU-aaaa".to_string(),
                vec![("1c.3g.20gb".to_string(), "MIG-GPU-aaaa/1/0".to_string())]
            )]
        );
        assert!(parse_list("").is_empty());
    }

    /// An executable script `body`, `DIR/NAME/nvidia-smi`.
    fn script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).expect("script directory");
        let path = dir.join("nvidia-smi");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).expect("mode");
        path
    }

    #[test]
    fn the_listing_is_read_and_a_hung_or_failing_lister_is_not_waited_for() {
        let dir = ScratchDir::new("mig", "lister");
        let fake = script(
            &dir,
            "ok",
            &format!("[ \"$1\" = -L ] || exit 3\ncat <<'END'\n{LISTING}END"),
        );
        let text = list_from(&fake, Duration::from_secs(10)).expect("listed");
        assert_eq!(parse_list(&text).len(), 2, "{text}");
        let failing = script(&dir, "failing", "echo 'NVIDIA-SMI has failed' >&2; exit 9");
        let e = list_from(&failing, Duration::from_secs(10)).expect_err("failed");
        assert!(e.contains("nvidia-smi -L failed"), "{e}");
        let hung = script(&dir, "hung", "exec sleep 60");
        let t0 = Instant::now();
        let e = list_from(&hung, Duration::from_millis(300)).expect_err("hung");
        assert!(e.contains("did not end within 0.3 s"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        let e = list_from(
            std::path::Path::new("/nonexistent/nvidia-smi"),
            LIST_TIMEOUT,
        )
        .expect_err("missing");
        assert!(e.contains("running nvidia-smi -L"), "{e}");
    }

    fn gpu(index: u32, uuid: &str, mig: Option<Vec<MigInstance>>) -> PhysicalGpu {
        PhysicalGpu {
            index,
            kind: "a100".into(),
            memory_bytes: 40 * GIB,
            uuid: uuid.into(),
            mig,
        }
    }

    fn instance(profile: &str, uuid: &str, gib: u64) -> MigInstance {
        MigInstance {
            profile: profile.into(),
            uuid: uuid.into(),
            memory_bytes: gib * GIB,
        }
    }

    #[test]
    fn without_mig_every_gpu_is_offered_by_its_index() {
        let o = offered(&[gpu(0, "GPU-a", None), gpu(1, "GPU-b", None)]);
        assert_eq!(o.names, vec![None, None]);
        assert_eq!(o.accelerators.len(), 2);
        assert!(
            o.accelerators
                .iter()
                .all(|a| a.kind == "a100" && a.speed == 1.0)
        );
        assert!(o.warnings.is_empty());
    }

    #[test]
    fn a_split_gpu_is_offered_as_its_instances_and_the_other_gpus_by_uuid() {
        let o = offered(&[
            gpu(
                0,
                "GPU-a",
                Some(vec![
                    instance("3g.20gb", "MIG-x", 20),
                    instance("1g.5gb+me", "MIG-y", 5),
                ]),
            ),
            gpu(1, "GPU-b", None),
        ]);
        let kinds: Vec<&str> = o.accelerators.iter().map(|a| a.kind.as_str()).collect();
        assert_eq!(kinds, ["a100-3g.20gb", "a100-1g.5gb-me", "a100"]);
        assert_eq!(
            o.names,
            vec![
                Some("MIG-x".to_string()),
                Some("MIG-y".to_string()),
                // GPU 1 is the agent's device 2, which CUDA's index 2 would not be.
                Some("GPU-b".to_string())
            ]
        );
        let memory: Vec<u64> = o.accelerators.iter().map(|a| a.memory_bytes).collect();
        assert_eq!(memory, [20 * GIB, 5 * GIB, 40 * GIB]);
        let speed: Vec<f64> = o.accelerators.iter().map(|a| a.speed).collect();
        assert_eq!(speed, [0.5, 0.125, 1.0]);
        assert!(o.warnings.is_empty());
    }

    #[test]
    fn a_gpu_in_mig_mode_without_instances_offers_nothing_and_says_so() {
        let o = offered(&[gpu(0, "GPU-a", Some(vec![])), gpu(1, "", None)]);
        assert!(o.accelerators.is_empty(), "{:?}", o.accelerators);
        assert_eq!(o.warnings.len(), 2, "{:?}", o.warnings);
        assert!(o.warnings[0].contains("GPU 0 is in MIG mode and has no MIG instances"));
        assert!(
            o.warnings[1].contains("GPU 1: beside a GPU in MIG mode"),
            "{:?}",
            o.warnings
        );
    }

    #[test]
    fn a_uuid_that_cannot_stand_in_cuda_visible_devices_or_is_listed_twice_is_offered_at_most_once()
    {
        let o = offered(&[gpu(
            0,
            "GPU-a",
            Some(vec![
                instance("1g.5gb", "MIG-a,MIG-b", 5),
                instance("1g.5gb", "MIG-ok", 5),
                instance("1g.5gb", "MIG-ok", 5),
            ]),
        )]);
        assert_eq!(o.names, vec![Some("MIG-ok".to_string())]);
        assert_eq!(o.warnings.len(), 2, "{:?}", o.warnings);
        assert!(o.warnings[1].contains("listed twice"), "{:?}", o.warnings);
        assert!(
            o.warnings[0].contains("`MIG-a,MIG-b`: holds `,`"),
            "{:?}",
            o.warnings
        );
    }

    #[test]
    fn an_instance_nvml_does_not_know_keeps_a_whole_speed_and_no_memory() {
        let o = offered(&[gpu(0, "GPU-a", Some(vec![instance("2g.10gb", "MIG-z", 0)]))]);
        assert_eq!(o.accelerators[0].memory_bytes, 0);
        assert_eq!(o.accelerators[0].speed, 1.0);
    }

    #[test]
    fn every_instance_kind_is_one_a_registration_and_a_job_accept() {
        for (gpu, profile, kind) in [
            ("h100", "1g.10gb", "h100-1g.10gb"),
            ("a100", "1c.3g.20gb", "a100-1c.3g.20gb"),
            ("a100", "1g.5gb+me", "a100-1g.5gb-me"),
            ("h100", "", "h100-mig"),
            ("h100", "1G.10GB (weird)", "h100-1g.10gbweird"),
        ] {
            assert_eq!(instance_kind(gpu, profile), kind);
            hetsched_core::model::cluster::check_attribute(kind)
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
        }
        let long = instance_kind(&"x".repeat(60), "1g.10gb");
        assert_eq!(long.len(), crate::detect::MAX_KIND);
    }
}
