//! The state's events of divisible jobs ([`crate::jobs::divisible`]) that do not come through
//! heartbeats: an agent asking for a chunk, a chunk's result, and the reads the chunk service
//! needs before a transfer. Each runs under the state's lock for the bookkeeping only (the
//! bytes are streamed by [`crate::divisible_service`] outside it) and writes what it changed in
//! the state's one transaction, so the full-disk pause and rollback cover it.

use super::{State, StateError};
use crate::jobs::divisible::{
    ChunkKey, ChunkReply, ChunkRequest, ChunkResult, DivError, DivisibleChunk, ONE_CORE,
};
use std::path::{Path, PathBuf};

impl State {
    /// `NextChunk`: while the store refuses writes the agent is only noted alive (no chunk is
    /// handed out, nothing is reconciled). The agent of a node that does not work — declared
    /// dead, its agent gone, removed, or kept out since a restart ([`NodeRec::not_working`](super::nodes::NodeRec::not_working))
    /// — is refused ([`StateError::NodeNotWorking`]): it is neither noted nor handed a chunk,
    /// which the dead-node path would re-plan only when the node is declared dead again. Its
    /// heartbeat brings it back (or, kept out, its registration), and its asks are heard then.
    pub fn on_next_chunk(&mut self, mut req: ChunkRequest) -> Result<ChunkReply, StateError> {
        if let Some(why) = self.nodes.not_working(&req.name) {
            return Err(StateError::NodeNotWorking {
                node: req.name,
                why,
            });
        }
        // What the agent offers jobs that `require` attributes: its registration's (an agent
        // registers before it asks).
        req.attributes = self.nodes.attributes_of(&req.name);
        // Closed to new work as batch dispatch holds it (drained, its agent shutting down or
        // asked to stop): no new chunk; those it holds finish.
        req.drained = self.nodes.is_drained(&req.name);
        req.time_left = self.nodes.time_left(&req.name);
        req.capped = self.capped_divisible_jobs(&req.name);
        if self.paused() {
            self.jobs.divisible.seen(&req);
            return Ok(ChunkReply::default());
        }
        let mut reply = self.jobs.divisible.next_chunk(req)?;
        for order in &mut reply.orders {
            order.run_as = self.users.run_as(order.job_id);
            order.job_nonce = self.nonces.get(order.job_id);
        }
        // Until it holds an ask open, the agent lives by its calls.
        self.agent_may_be_lost();
        self.commit()?;
        // A job this ended (its workers gone) may release batch jobs that run after it.
        self.wake(None);
        Ok(reply)
    }

    /// Wakes the chunk asks held open that met their job's owner's cap on cores, if the owner
    /// has a core free now (after results gave cores back, or a cap changed).
    pub(super) fn wake_capped_chunk_asks(&mut self) {
        let (users, view) = (&mut self.users, &self.view);
        self.jobs.divisible.wake_capped_asks(|job| {
            let group = users.job_group(job);
            group.is_none() || view.group_room_for(group, &ONE_CORE)
        });
    }

    /// The running divisible jobs whose owners are at their cap on cores and whose next chunk
    /// would take agent `agent` another core: the core it holds (if any) is charged to another
    /// owner, so the chunk would start on a core of its own once that one ends.
    fn capped_divisible_jobs(&mut self, agent: &str) -> Vec<u64> {
        let booked = self.jobs.divisible.booked_group(agent);
        let running: Vec<u64> = self.jobs.divisible.running_jobs().collect();
        running
            .into_iter()
            .filter(|&id| {
                let group = self.users.job_group(id);
                group.is_some()
                    && booked != Some(group)
                    && !self.view.group_room_for(group, &ONE_CORE)
            })
            .collect()
    }

    /// Books the cores of the agents computing chunks ([`Divisible::rebook`](crate::jobs::divisible::Divisible::rebook)) when a chunk or
    /// job changed (or an agent waits for its core): each counts against its job's owner's
    /// cap and as its fair-share usage, as a batch task's does.
    pub(super) fn rebook_chunks(&mut self) {
        if !self.jobs.divisible.needs_rebook() {
            return;
        }
        let users = &mut self.users;
        self.jobs
            .divisible
            .rebook(&mut self.view, &self.nodes, |job| users.job_group(job));
    }

    /// What an ask held open by the chunk service waits on: a receiver of every later change
    /// of divisible jobs, and how long it may go without a look ([`Divisible::hold`](crate::jobs::divisible::Divisible::hold)).
    pub fn divisible_changes(&self) -> (tokio::sync::watch::Receiver<u64>, std::time::Duration) {
        (self.jobs.divisible.changes(), self.jobs.divisible.hold())
    }

    /// `ChunkDone`: records a chunk's result (its output, if it succeeded, is in `tmp`, synced).
    /// True when it counted. Refused while the store refuses writes (the agent retries).
    pub fn on_chunk_done(
        &mut self,
        h: &ChunkResult,
        tmp: Option<&Path>,
    ) -> Result<bool, StateError> {
        if self.paused() {
            return Err(DivError::NotReady(
                "the server's store refuses writes (is its disk full?): retry".into(),
            )
            .into());
        }
        let recorded = self.jobs.divisible.record(h, tmp)?;
        self.commit()?;
        // Its last chunk may release batch jobs that run after the job: their agents are woken.
        self.wake(None);
        Ok(recorded)
    }

    /// Where chunk `key`'s input is (file, offset, length), if the chunk is out.
    pub fn chunk_input(&self, key: &ChunkKey) -> Result<(PathBuf, u64, u64), StateError> {
        Ok(self.jobs.divisible.input_slice(key)?)
    }

    /// `ChunkInput`: [`State::chunk_input`] for the agent of node `node`, which must prove it
    /// ([`State::prove_agent`]) and be the one the chunk is out to.
    pub fn chunk_input_for(
        &self,
        node: &str,
        identity: &str,
        key: &ChunkKey,
    ) -> Result<(PathBuf, u64, u64), StateError> {
        self.prove_agent(node, identity)?;
        self.check_chunk_holder(node, key)?;
        self.chunk_input(key)
    }

    /// `ChunkDone`: [`State::on_chunk_done`] from the agent of node `node`, which must prove it
    /// ([`State::prove_agent`]) and be the one the chunk is out to; otherwise nothing is
    /// recorded.
    pub fn on_chunk_done_from(
        &mut self,
        node: &str,
        identity: &str,
        h: &ChunkResult,
        tmp: Option<&Path>,
    ) -> Result<bool, StateError> {
        self.check_chunk_done_from(node, identity, h)?;
        self.on_chunk_done(h, tmp)
    }

    /// The checks of [`State::on_chunk_done_from`], made before its output is received.
    pub fn check_chunk_done_from(
        &self,
        node: &str,
        identity: &str,
        h: &ChunkResult,
    ) -> Result<(), StateError> {
        self.prove_agent(node, identity)?;
        self.check_chunk_holder(
            node,
            &ChunkKey {
                job_id: h.job_id,
                chunk: h.chunk,
            },
        )
    }

    /// Refuses chunk `key` to node `node` when it is out to another node. A chunk out to no
    /// node (done, lost, stopped, or no such chunk) is left to the call: its input is not
    /// ready, its result not recorded, as for its own agent once it was re-planned.
    fn check_chunk_holder(&self, node: &str, key: &ChunkKey) -> Result<(), StateError> {
        let elsewhere = self
            .jobs
            .divisible
            .chunk(key.job_id, key.chunk)
            .is_ok_and(|(c, _)| c.state == "out" && c.worker != node);
        if !elsewhere {
            return Ok(());
        }
        tracing::warn!(
            node,
            job = key.job_id,
            chunk = key.chunk,
            "a chunk asked for by another node than the one it is out to: refused"
        );
        Err(StateError::ChunkNotOutTo {
            job: key.job_id,
            chunk: key.chunk,
            node: node.to_string(),
        })
    }

    /// The gathered output of a completed divisible job.
    pub fn divisible_output(&self, id: u64) -> Result<PathBuf, StateError> {
        match self.ids.kind(id) {
            Some(crate::jobs::Kind::Divisible) if self.jobs.divisible.knows(id) => {
                Ok(self.jobs.divisible.output_path(id)?)
            }
            // Another kind's job: say what it is (a purged job is no job).
            Some(kind) if kind != crate::jobs::Kind::Divisible && self.get_job(id).is_ok() => {
                Err(StateError::Invalid(format!(
                    "job {id} is a {} job: `hetsched output` gathers a divisible job's output \
                     (`hetsched log {id} TASK` prints a task's)",
                    kind.as_str()
                )))
            }
            _ => Err(StateError::NoJob(id)),
        }
    }

    /// Whether job `id` is a divisible job.
    pub fn is_divisible(&self, id: u64) -> bool {
        self.jobs.divisible.knows(id)
    }

    /// Chunk `chunk` of divisible job `id`, and where the server keeps its stdout once it is
    /// done ([`crate::jobs::divisible::Divisible::chunk`]).
    pub fn divisible_chunk(
        &self,
        id: u64,
        chunk: u64,
    ) -> Result<(DivisibleChunk, Option<PathBuf>), StateError> {
        Ok(self.jobs.divisible.chunk(id, chunk)?)
    }

    /// `DATA_DIR/divisible`, where divisible jobs' files are.
    pub fn divisible_dir(&self) -> PathBuf {
        self.jobs.divisible.dir().to_path_buf()
    }
}
