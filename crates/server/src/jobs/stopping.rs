//! Tasks (batch tasks, workflow instances, divisible chunks) whose processes are still being
//! stopped, for the kinds whose work runs as agents' processes: a task cancelled while it ran is
//! recorded as cancelled at once, but its agent stops its process group with SIGTERM and waits
//! up to the kill grace before SIGKILL, so its processes (a SIGTERM handler cleaning up) may run
//! on for a while. Until its agent says the process ended, the task is *stopping*: its job shows
//! how many such tasks it has (`stopping` in its JSON), a `wait` on it returns only once there
//! are none (Slurm's job stays *completing* until its processes are gone), and its rows stay in
//! memory (a finished job is not evicted while one of its tasks stops, so the late result
//! still finds its row).
//!
//! A stopping task stops being one when whichever comes first:
//! - its agent reports the attempt's result (the process ended);
//! - a heartbeat of its node lists neither the attempt as running nor its result (the process
//!   is gone: the assignment never reached the agent, or the agent restarted and killed it);
//! - its node is declared dead or left: nothing will ever say more, so nothing is waited for.
//!
//! A divisible job's chunks do not travel in heartbeats: the divisible kind keys each chunk by
//! a task id of its own kind (`jobs::divisible::chunk_task`; attempt 0: a chunk is sent once)
//! and its agent's chunk ask stands for the heartbeat — an ask that no longer lists the chunk
//! among those the agent holds says its process ended (the agent lists a dropped chunk until its
//! process has ended), and the loss of the agent (its node dead or gone, or its asks silent for
//! the dead timeout) ends it as a node's death does.
//!
//! Stored (`task_stops`, written with the event's transaction), so a restart keeps them: a
//! restarted server goes on waiting for what its agents still run. It never waits on a process
//! end that will not be reported: a reconnected agent re-sends the results it was not
//! acknowledged and lists what it still runs, so the node's first heartbeat (a divisible
//! agent's first ask) settles every stopping task there, and a node that does not come back is
//! declared dead ([`crate::state::RESTART_GRACE`]), which ends the rest. A row whose task is no
//! longer cancelled at that attempt, or whose node is gone, is dropped at the restart.

use std::collections::{HashMap, HashSet};

/// The stopping tasks, by node and by job.
#[derive(Debug, Default)]
pub(crate) struct Stopping {
    /// Node → task → (attempt, job).
    by_node: HashMap<u32, HashMap<u64, (u32, u64)>>,
    /// Job → how many of its tasks stop (no entry for none).
    by_job: HashMap<u64, u32>,
    /// Changes since the last commit, for the store: (task, `Some((attempt, node))` added,
    /// `None` gone).
    changes: Vec<(u64, Option<(u32, u32)>)>,
}

impl Stopping {
    /// Attempt `attempt` of task `task` of job `job` was stopped on node `node`: its process
    /// may run until its agent says it ended.
    pub(crate) fn add(&mut self, node: u32, task: u64, attempt: u32, job: u64) {
        self.changes.push((task, Some((attempt, node))));
        self.restore(node, task, attempt, job);
    }

    /// [`Stopping::add`] of a stored row (a restart): nothing to store.
    pub(crate) fn restore(&mut self, node: u32, task: u64, attempt: u32, job: u64) {
        let old = self
            .by_node
            .entry(node)
            .or_default()
            .insert(task, (attempt, job));
        if old.is_none() {
            *self.by_job.entry(job).or_default() += 1;
        }
    }

    /// How many of job `job`'s tasks stop.
    pub(crate) fn of_job(&self, job: u64) -> u32 {
        if self.by_job.is_empty() {
            return 0;
        }
        self.by_job.get(&job).copied().unwrap_or(0)
    }

    /// Whether any task stops.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }

    /// Node `node` reported attempt `attempt` of task `task` ended. Returns the job whose last
    /// stopping task that was, if it was one.
    pub(crate) fn ended(&mut self, node: u32, task: u64, attempt: u32) -> Option<u64> {
        let on = self.by_node.get_mut(&node)?;
        match on.get(&task) {
            Some(&(a, job)) if a == attempt => {
                on.remove(&task);
                self.changes.push((task, None));
                if on.is_empty() {
                    self.by_node.remove(&node);
                }
                self.drop_one(job)
            }
            _ => None,
        }
    }

    /// A heartbeat of node `node` listed `running` (task, attempt): what stopped there and is
    /// not listed is gone. Returns the jobs whose last stopping task went.
    pub(crate) fn beat(&mut self, node: u32, running: &HashSet<(u64, u32)>) -> Vec<u64> {
        let Some(on) = self.by_node.get_mut(&node) else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        let changes = &mut self.changes;
        on.retain(|&task, &mut (attempt, job)| {
            let keep = running.contains(&(task, attempt));
            if !keep {
                gone.push(job);
                changes.push((task, None));
            }
            keep
        });
        if on.is_empty() {
            self.by_node.remove(&node);
        }
        gone.into_iter().filter_map(|j| self.drop_one(j)).collect()
    }

    /// The tasks stopping on node `node`: (task, attempt, job).
    pub(crate) fn on(&self, node: u32) -> Vec<(u64, u32, u64)> {
        self.by_node.get(&node).map_or_else(Vec::new, |on| {
            on.iter()
                .map(|(&task, &(attempt, job))| (task, attempt, job))
                .collect()
        })
    }

    /// Whether node `node` has stopping tasks (its heartbeat need not be looked at otherwise).
    pub(crate) fn on_node(&self, node: u32) -> bool {
        !self.by_node.is_empty() && self.by_node.contains_key(&node)
    }

    /// Node `node` is gone (dead, left): nothing of its tasks will be reported. Returns the
    /// jobs whose last stopping task that was.
    pub(crate) fn node_gone(&mut self, node: u32) -> Vec<u64> {
        let Some(on) = self.by_node.remove(&node) else {
            return Vec::new();
        };
        let mut ended = Vec::new();
        for (task, (_, job)) in on {
            self.changes.push((task, None));
            ended.extend(self.drop_one(job));
        }
        ended
    }

    /// Jobs `ids` were purged: whatever of theirs still stops is forgotten.
    pub(crate) fn forget_jobs(&mut self, ids: &HashSet<u64>) {
        if self.by_job.is_empty() {
            return;
        }
        let changes = &mut self.changes;
        for on in self.by_node.values_mut() {
            on.retain(|&task, &mut (_, job)| {
                let purged = ids.contains(&job);
                if purged {
                    changes.push((task, None));
                }
                !purged
            });
        }
        self.by_node.retain(|_, on| !on.is_empty());
        self.by_job.retain(|job, _| !ids.contains(job));
    }

    /// A row of `task_stops` names what no longer stops (read at a restart): it goes from
    /// the store with the next commit.
    pub(crate) fn drop_stored(&mut self, task: u64) {
        self.changes.push((task, None));
    }

    /// The changes since the last commit, in order, for the store.
    pub(crate) fn changes(&self) -> &[(u64, Option<(u32, u32)>)] {
        &self.changes
    }

    /// The changes were committed.
    pub(crate) fn committed(&mut self) {
        self.changes.clear();
    }

    /// One task of job `job` stops no more; returns `job` if it was its last.
    fn drop_one(&mut self, job: u64) -> Option<u64> {
        let n = self.by_job.get_mut(&job)?;
        *n -= 1;
        if *n == 0 {
            self.by_job.remove(&job);
            return Some(job);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_stops_until_each_of_its_tasks_ended_vanished_or_lost_its_node() {
        let mut s = Stopping::default();
        s.add(0, 10, 1, 7);
        s.add(0, 11, 1, 7);
        s.add(1, 12, 2, 7);
        s.add(1, 20, 1, 8);
        assert_eq!(s.of_job(7), 3);
        // Another attempt's result is not this one's end.
        assert_eq!(s.ended(0, 10, 2), None);
        assert_eq!(s.ended(0, 10, 1), None);
        assert_eq!(s.of_job(7), 2);
        // Node 0 still runs task 11: it stops on.
        let running: HashSet<(u64, u32)> = [(11, 1)].into();
        assert_eq!(s.beat(0, &running), Vec::<u64>::new());
        // Then it is gone from node 0's list.
        assert_eq!(s.beat(0, &HashSet::new()), Vec::<u64>::new());
        assert_eq!(s.of_job(7), 1);
        assert!(!s.on_node(0));
        // Node 1 dies: both jobs' last stopping tasks go with it.
        let mut ended = s.node_gone(1);
        ended.sort_unstable();
        assert_eq!(ended, [7, 8]);
        assert!(s.is_empty());
        assert_eq!(s.of_job(7), 0);
    }

    #[test]
    fn every_change_goes_to_the_store_and_a_purge_keeps_the_counts_true() {
        let mut s = Stopping::default();
        s.add(0, 1, 1, 5);
        s.restore(0, 2, 1, 5);
        s.add(2, 3, 1, 6);
        assert_eq!((s.of_job(5), s.of_job(6)), (2, 1));
        s.forget_jobs(&[6].into());
        assert_eq!((s.of_job(5), s.of_job(6)), (2, 0));
        assert!(!s.on_node(2));
        assert_eq!(s.ended(0, 1, 1), None);
        assert_eq!(s.node_gone(0), [5]);
        assert!(s.is_empty());
        assert_eq!(
            s.changes(),
            [
                (1, Some((1, 0))),
                (3, Some((1, 2))),
                (3, None),
                (1, None),
                (2, None)
            ],
            "a restored row is stored already"
        );
        s.committed();
        assert!(s.changes().is_empty());
    }
}
