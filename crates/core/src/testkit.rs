//! Builders for hand-made clusters and applications, for tests, benchmarks and examples:
//! `node("n0").cores(6).gpus(4, "c2050").build(NodeId(0))`, `app("knn").gpu(..).cpu(..).build(AppId(0))`.

use crate::model::{
    Accelerator, AppId, Application, CpuVariant, GpuVariant, Node, NodeId, RackId, Resources,
};
use crate::time::{Time, secs};

/// Starts a node description with one core, 1 GiB, a 128 MB/s disk and no GPU.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder {
        node: Node {
            id: NodeId(0),
            name: name.to_string(),
            rack: RackId(0),
            cores: 1,
            core_speed: 1.0,
            memory_bytes: 1 << 30,
            disk_read_bw: 128.0 * 1024.0 * 1024.0,
            net_bw: 125_000_000.0,
            net_latency: 100_000,
            accelerators: Vec::new(),
            attributes: Vec::new(),
        },
    }
}

/// A node under construction.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    /// Sets the core count.
    pub fn cores(mut self, cores: u32) -> Self {
        self.node.cores = cores;
        self
    }
    /// Sets the memory in bytes.
    pub fn memory(mut self, bytes: u64) -> Self {
        self.node.memory_bytes = bytes;
        self
    }
    /// Sets the disk read bandwidth in MiB/s.
    pub fn disk_mib_s(mut self, mib_s: f64) -> Self {
        self.node.disk_read_bw = mib_s * 1024.0 * 1024.0;
        self
    }
    /// Adds `count` accelerators of `kind` with speed 1.0 and 3 GiB each.
    pub fn gpus(mut self, count: u32, kind: &str) -> Self {
        for _ in 0..count {
            self.node.accelerators.push(Accelerator {
                kind: kind.to_string(),
                memory_bytes: 3 << 30,
                speed: 1.0,
            });
        }
        self
    }
    /// Sets the attributes tasks may require (sorted here).
    pub fn attributes(mut self, attributes: &[&str]) -> Self {
        self.node.attributes = attributes.iter().map(|a| (*a).to_string()).collect();
        self.node.attributes.sort();
        self
    }
    /// Sets the rack.
    pub fn rack(mut self, rack: RackId) -> Self {
        self.node.rack = rack;
        self
    }
    /// The node, with id `id`.
    pub fn build(mut self, id: NodeId) -> Node {
        self.node.id = id;
        self.node
    }
}

/// Starts an application with a 64 MiB split, 10 tasks, no variant yet.
pub fn app(name: &str) -> AppBuilder {
    AppBuilder {
        app: Application {
            id: AppId(0),
            name: name.to_string(),
            priority: 0,
            submit_time: 0,
            split_bytes: 64 << 20,
            tasks: 10,
            cpu: None,
            gpu: None,
            requires: Vec::new(),
            max_running: 0,
            nodes: 1,
            user: None,
        },
    }
}

/// An application under construction.
#[derive(Clone, Debug)]
pub struct AppBuilder {
    app: Application,
}

impl AppBuilder {
    /// Sets the node attributes every task requires.
    pub fn requires(mut self, attributes: &[&str]) -> Self {
        self.app.requires = attributes.iter().map(|a| (*a).to_string()).collect();
        self.app.requires.sort();
        self
    }
    /// Whole nodes each task holds (a multi-node task from 2).
    pub fn nodes(mut self, n: u32) -> Self {
        self.app.nodes = n;
        self
    }
    /// Sets the most tasks that may run at once (0: no limit).
    pub fn max_running(mut self, n: u32) -> Self {
        self.app.max_running = n;
        self
    }
    /// Sets the number of tasks.
    pub fn tasks(mut self, n: u32) -> Self {
        self.app.tasks = n;
        self
    }
    /// Sets the split size in MiB.
    pub fn split_mib(mut self, mib: u64) -> Self {
        self.app.split_bytes = mib << 20;
        self
    }
    /// Sets the priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.app.priority = p;
        self
    }
    /// Sets the start time.
    pub fn submitted_at(mut self, t: Time) -> Self {
        self.app.submit_time = t;
        self
    }
    /// Adds a CPU variant: `compute` and `read` seconds, one core.
    pub fn cpu(mut self, compute: f64, read: f64) -> Self {
        self.app.cpu = Some(CpuVariant {
            compute: secs(compute),
            read: secs(read),
            request: Resources::new(1, 0, 0),
            time_limit: None,
        });
        self
    }
    /// Adds a GPU variant: `compute`, `copy`, `read` seconds, one GPU plus one core.
    pub fn gpu(mut self, compute: f64, copy: f64, read: f64) -> Self {
        self.app.gpu = Some(GpuVariant {
            compute: secs(compute),
            copy: secs(copy),
            read: secs(read),
            request: Resources::new(1, 0, 1),
            kind: None,
            time_limit: None,
        });
        self
    }
    /// Each CPU task holds `cores` cores (after [`AppBuilder::cpu`]).
    pub fn cpu_cores(mut self, cores: u32) -> Self {
        if let Some(cpu) = &mut self.app.cpu {
            cpu.request.cores = cores;
        }
        self
    }
    /// Each CPU task holds `bytes` of memory (after [`AppBuilder::cpu`]).
    pub fn cpu_memory(mut self, bytes: u64) -> Self {
        if let Some(cpu) = &mut self.app.cpu {
            cpu.request.memory_bytes = bytes;
        }
        self
    }
    /// The application, with id `id`.
    pub fn build(mut self, id: AppId) -> Application {
        self.app.id = id;
        self.app
    }
}

/// Mangled input files for robustness tests: [`mangle`] applies draws (from a property-test
/// strategy, or any other source of numbers) to a valid file — values replaced by hostile ones,
/// lines dropped, doubled or swapped, stray bytes inserted — so every parser, and everything
/// behind it, can be run against text a careless or hostile user might send.
pub mod mangle {
    /// Values that have broken parsers elsewhere: bounds, signs, floats where integers go,
    /// strings where numbers go, ranges that end before they start, units that overflow.
    pub const HOSTILE: &[&str] = &[
        "0",
        "-1",
        "1",
        "4294967295",
        "4294967296",
        "9223372036854775807",
        "18446744073709551615",
        "1e308",
        "-1e308",
        "nan",
        "inf",
        "-inf",
        "0.0",
        "1.5",
        "\"\"",
        "\"0\"",
        "\"-1s\"",
        "\"0s\"",
        "\"1e300s\"",
        "\"99999999999999999999h\"",
        "\"18446744073709551615ms\"",
        "\"1ns\"",
        "\"1e-30s\"",
        "\"16EiB\"",
        "\"99999999999PiB\"",
        "\"-1GiB\"",
        "\"1..=0\"",
        "\"0..=4294967295\"",
        "\"1..=18446744073709551615\"",
        "\"5..=5\"",
        "\"1-100%0\"",
        "\"0-99:0\"",
        "[]",
        "[\"\"]",
        "[\"gpu\", \"gpu\"]",
        "{}",
        "{ mean = \"1s\", cv = -1 }",
        "{ mean = \"1s\", cv = 1e308 }",
        "{ mean = \"0s\", cv = 0.5 }",
        "true",
        "\"{index}{index}{output:zz}{input:zz}\"",
        "\"../../etc/passwd\"",
        "\"\u{0}\"",
        "\"é😀\"",
    ];

    /// What a mutation inserts between tokens: broken syntax as well as plausible fields.
    pub const STRAY: &[&str] = &[
        "\n",
        "=",
        "[",
        "]]",
        "[[task]]\n",
        "[[application]]\n",
        "[[divisible]]\n",
        "[[node]]\n",
        "\"",
        "'",
        "#",
        ",",
        "\u{0}",
        "é",
        "\nname = \"x\"\n",
        "\ninstances = 1000000000\n",
        "\ntasks = 4294967295\n",
    ];

    /// `text` after each draw `(kind, a, b)` in turn (any numbers; they are reduced modulo what
    /// they index): kind 0–3 replaces the value after the `=` of the `a`-th line that has one
    /// with `HOSTILE[b]`; 4 drops line `a`; 5 doubles it; 6 swaps lines `a` and `b`; 7 inserts
    /// `STRAY[b]` at character `a`.
    pub fn mangle(text: &str, draws: &[(u8, usize, usize)]) -> String {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        for &(kind, a, b) in draws {
            if lines.is_empty() {
                lines.push(String::new());
            }
            let n = lines.len();
            match kind % 8 {
                0..=3 => {
                    let with_value: Vec<usize> =
                        (0..n).filter(|&i| lines[i].contains('=')).collect();
                    if !with_value.is_empty() {
                        let i = with_value[a % with_value.len()];
                        let key = lines[i].split('=').next().unwrap_or_default().to_string();
                        lines[i] = format!("{key}= {}", HOSTILE[b % HOSTILE.len()]);
                    }
                }
                4 => {
                    lines.remove(a % n);
                }
                5 => {
                    let l = lines[a % n].clone();
                    lines.insert(a % n, l);
                }
                6 => lines.swap(a % n, b % n),
                _ => {
                    let mut joined = lines.join("\n");
                    let chars = joined.chars().count();
                    let byte = joined
                        .char_indices()
                        .nth(a % (chars + 1))
                        .map_or(joined.len(), |(i, _)| i);
                    joined.insert_str(byte, STRAY[b % STRAY.len()]);
                    lines = joined.lines().map(str::to_string).collect();
                }
            }
        }
        lines.join("\n") + "\n"
    }
}

/// A test's own new directory in the system's temporary one (`$TMPDIR`, else `/tmp`),
/// `hetsched-{what}-{name}-XXXXXX` with a random end: no two tests, and no two runs, ever share
/// one, and none is found left from an earlier run. Derefs to its path.
///
/// When it drops it is removed with everything in it ([`tempfile::TempDir`] does that), so that a
/// passing test leaves nothing behind. While a panic unwinds (a failing test) it is kept instead,
/// and its path is written to stderr: what the test left in it is the evidence of the failure.
///
/// Whatever writes into it — a server, an agent, a browser the test started — must be stopped
/// before it drops, or files reappear while it is being removed: a guard that stops them is
/// declared after the directory (locals drop in reverse order), or a struct that holds both stops
/// them in its `Drop` (which runs before its fields drop).
///
/// With the `scratch` feature (which brings `tempfile`), turned on by the crates' dev-dependencies.
#[cfg(feature = "scratch")]
#[derive(Debug)]
pub struct ScratchDir {
    /// The directory's path, as the `PathBuf` the tests pass around.
    path: std::path::PathBuf,
    /// Removes the directory when it drops, unless told to keep it.
    dir: tempfile::TempDir,
}

#[cfg(feature = "scratch")]
impl ScratchDir {
    /// A new, empty `TMP/hetsched-{what}-{name}-XXXXXX`.
    ///
    /// # Panics
    /// When the directory cannot be made (a test's setup).
    #[allow(clippy::expect_used)] // a test's setup: it should stop with the error
    pub fn new(what: &str, name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("hetsched-{what}-{name}-"))
            .tempdir()
            .expect("a scratch directory in the temporary directory");
        Self {
            path: dir.path().to_path_buf(),
            dir,
        }
    }

    /// The directory's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

#[cfg(feature = "scratch")]
impl std::ops::Deref for ScratchDir {
    type Target = std::path::PathBuf;
    fn deref(&self) -> &std::path::PathBuf {
        &self.path
    }
}

#[cfg(feature = "scratch")]
impl AsRef<std::path::Path> for ScratchDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.path
    }
}

/// For a command's argument or environment (`.arg(&dir)`, `.env("D", &dir)`).
#[cfg(feature = "scratch")]
impl AsRef<std::ffi::OsStr> for ScratchDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

#[cfg(feature = "scratch")]
impl Drop for ScratchDir {
    /// Runs before the `TempDir` field drops, which removes the directory unless told here not
    /// to.
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "the failing test's directory is kept: {}",
                self.path.display()
            );
        }
    }
}

#[cfg(all(test, feature = "scratch"))]
mod scratch_tests {
    use super::ScratchDir;

    /// A passing test's directory goes with everything in it; a failing test's stays, for a look
    /// at what it left.
    #[test]
    fn a_scratch_directory_is_removed_when_dropped_and_kept_while_a_panic_unwinds() {
        let dir = ScratchDir::new("testkit", "removed");
        let path = dir.to_path_buf();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        assert!(name.starts_with("hetsched-testkit-removed-"), "{name}");
        assert_eq!(path.parent(), Some(std::env::temp_dir().as_path()));
        std::fs::create_dir_all(dir.join("sub")).expect("a subdirectory");
        std::fs::write(dir.join("sub/file"), "x").expect("a file");
        drop(dir);
        assert!(!path.exists(), "{} left behind", path.display());

        let failing = std::thread::spawn(|| {
            let dir = ScratchDir::new("testkit", "kept");
            std::fs::write(dir.join("evidence"), "x").expect("a file");
            let path = dir.to_path_buf();
            std::panic::panic_any(path);
        });
        let payload = failing.join().expect_err("the thread panicked");
        let path = payload
            .downcast::<std::path::PathBuf>()
            .expect("the kept path");
        assert!(path.join("evidence").exists(), "{} removed", path.display());
        std::fs::remove_dir_all(&*path).expect("removed by the test");
    }
}
