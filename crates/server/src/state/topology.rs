//! The state's door for stream topologies ([`crate::jobs::topology`]): each request is one event
//! of the topology kind, followed by the same `State::commit` as every other event (one
//! transaction for what every kind changed; a refused write rolls memory back and pauses) and by
//! re-booking the running workers' cores in the view.

use super::{State, StateError};
use crate::jobs::topology::{
    Topology, TopologyError, TopologySubmission, WorkersSeen, WorkersToRun,
};
use prometheus_client::registry::Registry;

impl State {
    /// Runs one topology event; `writes`: refused while the store refuses writes.
    fn topology_event<T>(
        &mut self,
        writes: bool,
        f: impl FnOnce(&mut Topology, &mut crate::users::Users) -> Result<T, TopologyError>,
    ) -> Result<T, StateError> {
        if writes && self.paused() {
            return Err(StateError::Invalid(
                "the store refuses writes (is the disk full?): try again once it accepts them"
                    .into(),
            ));
        }
        // The dead-node path (`State::check_dead`) and drains decide for topologies too.
        self.jobs.topology.see_nodes(&self.nodes);
        // Placements see the cores batch tasks and other topologies hold.
        self.jobs.topology.see_view(&self.view, &self.nodes);
        let before = self.jobs.topology.placements_key();
        let answer = f(&mut self.jobs.topology, &mut self.users);
        self.jobs
            .topology
            .rebook(&mut self.view, &self.nodes, &mut self.users);
        self.commit()?;
        // After the commit: a refused write rebuilt the kind, which woke every waiter already.
        self.jobs.topology.note_changes(before);
        Ok(answer?)
    }

    /// What a held sync and the idle controller tick wait on ([`Topology::changes`]).
    pub fn topology_changes(&self) -> (tokio::sync::watch::Receiver<u64>, std::time::Duration) {
        self.jobs.topology.changes()
    }

    /// Whether the controller's tick has work (a topology runs or waits to be placed).
    pub fn topology_running(&self) -> bool {
        self.jobs.topology.is_running()
    }

    /// `hetsched topology submit`.
    pub fn topology_submit(
        &mut self,
        sub: TopologySubmission,
    ) -> Result<serde_json::Value, StateError> {
        self.topology_submit_as(sub, crate::users::ADMIN)
    }

    /// `hetsched topology submit` by `owner` (a user's name or [`crate::users::ADMIN`]): the
    /// topology is `owner`'s; a topology of the same name (killed: a running one is refused
    /// anyway) is replaced only by its owner or the admin.
    pub fn topology_submit_as(
        &mut self,
        sub: TopologySubmission,
        owner: &str,
    ) -> Result<serde_json::Value, StateError> {
        // A file that does not parse is refused by the submission itself, naming what is wrong.
        if let Ok(topo) =
            hetsched_core::input::stream_code::parse_runnable_topology(&sub.origin, &sub.text)
        {
            let name = &topo.topology.name;
            if self.jobs.topology.show(name).is_ok() {
                self.check_topology_owner(owner, name, "submit a topology of its name")?;
            }
            // Its workers hold at least its executors' declared load in cores, charged to the
            // owner: one that could never run under the owner's cap on cores is refused (a
            // worker is not stopped for the cap, so it would hold them beyond it) — with the
            // owner's other running topologies, which hold theirs as long as they run (each
            // checked alone, any number of them passed the cap together).
            let (mut others_cpu, mut others_memory) = (0.0f64, 0u64);
            if owner != crate::users::ADMIN {
                for (other, cpu, memory) in self.jobs.topology.running_declared() {
                    if other != name.as_str() && self.users.topology_owner(other) == owner {
                        others_cpu += cpu;
                        others_memory = others_memory.saturating_add(memory);
                    }
                }
            }
            // Its executors count against the owner's `max_unfinished_tasks_per_user`, as
            // tasks do (a running topology of the same name is refused by the kind anyway).
            if owner != crate::users::ADMIN {
                super::types::TaskRoom {
                    adding_bytes: sub.text.len() as u64,
                    ..self.task_room(owner)
                }
                .check_topology(&sub.origin, topo.topology.executor_count() as u64)
                .map_err(StateError::Invalid)?;
            }
            let cap = self.users.cap(owner).cores;
            let declared: f64 = topo.topology.declared_loads().iter().sum();
            let cores = (declared / 100.0).ceil();
            let others = (others_cpu / 100.0).ceil();
            if cap > 0 && cores > f64::from(cap) {
                return Err(StateError::Invalid(format!(
                    "topology `{name}` declares {declared}% of a core over its executors: its \
                     workers would hold at least {cores} cores, more than the {} {owner} may \
                     hold at once (`hetsched user limit`)",
                    hetsched_core::text::count(cap, "core")
                )));
            }
            if cap > 0 && ((declared + others_cpu) / 100.0).ceil() > f64::from(cap) {
                return Err(StateError::Invalid(format!(
                    "topology `{name}` declares {declared}% of a core over its executors: its \
                     workers would hold at least {cores} cores, and {owner}'s running \
                     topologies hold {others} already: together more than the {} {owner} may \
                     hold at once (`hetsched user limit`)",
                    hetsched_core::text::count(cap, "core")
                )));
            }
            // The same for memory: its workers hold every executor's declared memory.
            let cap = self.users.cap(owner).memory_bytes;
            let memory = topo
                .topology
                .memory()
                .into_iter()
                .fold(0u64, u64::saturating_add);
            if cap > 0 && memory > cap {
                return Err(StateError::Invalid(format!(
                    "topology `{name}` declares {} of memory over its executors, more than the \
                     {} {owner} may hold at once (`hetsched user limit`)",
                    bytesize::ByteSize(memory),
                    bytesize::ByteSize(cap)
                )));
            }
            if cap > 0 && memory.saturating_add(others_memory) > cap {
                return Err(StateError::Invalid(format!(
                    "topology `{name}` declares {} of memory over its executors, and {owner}'s \
                     running topologies hold {} already: together more than the {} {owner} may \
                     hold at once (`hetsched user limit`)",
                    bytesize::ByteSize(memory),
                    bytesize::ByteSize(others_memory),
                    bytesize::ByteSize(cap)
                )));
            }
        }
        let answer = self.topology_event(true, |t, users| {
            let status = t.submit(sub)?;
            if let Some(name) = status["name"].as_str() {
                users.stage_topology_owner(name, owner);
            }
            Ok(status)
        })?;
        Ok(self.with_owner(answer))
    }

    /// Refuses user `who` doing `action` to topology `name` unless it is its own (the admin
    /// may do anything; an unknown name passes, and the request itself says so).
    pub fn check_topology_owner(
        &self,
        who: &str,
        name: &str,
        action: &'static str,
    ) -> Result<(), StateError> {
        let owner = self.users.topology_owner(name);
        if who == crate::users::ADMIN || owner == who {
            return Ok(());
        }
        Err(StateError::NotOwner {
            what: format!("topology `{name}`"),
            owner: owner.to_string(),
            action,
        })
    }

    /// A topology's status (or a list of them) with each one's owner.
    fn with_owner(&self, mut v: serde_json::Value) -> serde_json::Value {
        let set = |s: &mut serde_json::Value| {
            let owner = s["name"]
                .as_str()
                .map(|n| self.users.topology_owner(n).to_string());
            if let (Some(o), Some(map)) = (owner, s.as_object_mut()) {
                map.insert("owner".into(), serde_json::Value::String(o));
            }
        };
        match v.as_array_mut() {
            Some(list) => list.iter_mut().for_each(set),
            None => set(&mut v),
        }
        v
    }

    /// `hetsched topology list`.
    pub fn topology_list(&self) -> serde_json::Value {
        self.with_owner(self.jobs.topology.list())
    }

    /// `hetsched topology show NAME`.
    pub fn topology_show(&self, name: &str) -> Result<serde_json::Value, StateError> {
        Ok(self.with_owner(self.jobs.topology.show(name)?))
    }

    /// `hetsched topology log NAME --worker W`: where the worker runs (the generation and index
    /// it started as, which its agent names its directory after, and its node) and the account
    /// it runs as on an agent with `run_as_owner`.
    pub fn topology_worker(
        &self,
        name: &str,
        worker: u32,
    ) -> Result<(u64, u32, String, String), StateError> {
        let (generation, index, node) = self.jobs.topology.worker_place(name, worker)?;
        Ok((generation, index, node, self.users.topology_run_as(name)))
    }

    /// `hetsched topology kill NAME`.
    pub fn topology_kill(&mut self, name: &str) -> Result<serde_json::Value, StateError> {
        let v = self.topology_event(true, |t, _| t.kill(name))?;
        Ok(self.with_owner(v))
    }

    /// `hetsched topology purge NAME`: a killed topology is forgotten — its record, traffic
    /// list and owner leave the store in one transaction, and its name is free for anyone.
    pub fn topology_purge(&mut self, name: &str) -> Result<(), StateError> {
        self.topology_event(true, |t, users| {
            t.purge(name)?;
            users.stage_topology_owner(name, crate::users::ADMIN);
            Ok(())
        })
    }

    /// The `[retention]` rule's `keep_finished` for topologies: those killed longer ago than
    /// `keep_ns` are purged, one event each. Returns how many.
    pub fn purge_killed_topologies(&mut self, keep_ns: u64) -> Result<usize, StateError> {
        let cutoff = crate::state::now_ns().saturating_sub(keep_ns);
        let names = self.jobs.topology.killed_before(cutoff);
        for name in &names {
            self.topology_purge(name)?;
        }
        Ok(names.len())
    }

    /// `hetsched topology rebalance NAME`.
    pub fn topology_rebalance(&mut self, name: &str) -> Result<serde_json::Value, StateError> {
        let v = self.topology_event(true, |t, _| t.rebalance(name))?;
        Ok(self.with_owner(v))
    }

    /// One agent's worker sync.
    pub fn topology_sync(
        &mut self,
        mut seen: WorkersSeen,
        from: Option<std::net::IpAddr>,
    ) -> Result<WorkersToRun, StateError> {
        // What the node offers topologies that `requires` attributes: its registration's.
        seen.attributes = self.nodes.attributes_of(&seen.node);
        let live: Vec<(String, u32)> = seen
            .workers
            .iter()
            .map(|w| (w.topology.clone(), w.worker))
            .collect();
        let node = seen.node.clone();
        let mut to_run = self.topology_event(false, |t, _| Ok(t.sync(seen, from)))?;
        // After a restart: what these workers held while the server was down.
        self.confirm_downtime_workers(&node, live.iter().map(|(t, w)| (t.as_str(), *w)));
        for w in &mut to_run.workers {
            w.run_as = self.users.topology_run_as(&w.topology);
        }
        Ok(to_run)
    }

    /// The controller's periodic pass (skipped while the store refuses writes).
    pub fn topology_tick(&mut self) -> Result<(), StateError> {
        if self.paused() {
            return Ok(());
        }
        self.topology_event(false, |t, _| {
            t.tick();
            Ok(())
        })
    }

    /// Cores the running topology workers hold in the view on node `node`.
    pub fn topology_held_cores(&self, node: u32) -> u32 {
        self.jobs.topology.held_cores(node)
    }

    /// Memory the running topology workers hold in the view on node `node`, in bytes.
    pub fn topology_held_memory(&self, node: u32) -> u64 {
        self.jobs.topology.held_memory(node)
    }

    /// Registers the `hetsched_topology_*` series (they survive a rollback: the rebuilt kind
    /// keeps the same families).
    pub fn register_topology_metrics(&self, r: &mut Registry) {
        self.jobs.topology.register_metrics(r);
    }
}
