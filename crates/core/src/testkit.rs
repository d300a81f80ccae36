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
        });
        self
    }
    /// The application, with id `id`.
    pub fn build(mut self, id: AppId) -> Application {
        self.app.id = id;
        self.app
    }
}
