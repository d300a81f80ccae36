//! Instance readiness: the launch node's task manager marks an instance ready when every producer
//! instance it waits for has finished (spec 05 §3; §2.4 event 2). Instances are numbered densely in
//! task order, and within a task by argument value then process: index = value_position ×
//! processes + process. Which producer instances an instance waits for is
//! [`DependencyKind::producers_of`]'s answer (and whom a finished one readies,
//! [`DependencyKind::consumers_of`]'s), the map the runtime uses too.
//!
//! An all-to-all dependency is counted once per producer *task* (not per producer instance), so a
//! million-instance workflow never materialises a quadratic edge list.

use super::{AttrMask, InstanceId, Wanted};
use crate::model::workflow::{DependencyKind, InstanceShape, Workflow};
use thiserror::Error;

/// A driver reported something the graph cannot accept.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum GraphError {
    /// The instance id is beyond the workflow.
    #[error("instance {0} does not exist")]
    Unknown(u32),
    /// A result for an instance that already finished: it ran twice.
    #[error("instance {0} finished twice")]
    FinishedTwice(u32),
    /// A result for an instance that was never ready.
    #[error("instance {0} finished before it was ready")]
    NotReady(u32),
    /// A result for an instance withdrawn from the workflow.
    #[error("instance {0} was withdrawn")]
    Withdrawn(u32),
}

/// The workflow's instances and what each still waits for.
#[derive(Clone, Debug)]
pub struct InstanceGraph {
    /// First instance of each task; `offset[tasks]` = total.
    offset: Vec<u32>,
    /// How each task's instances are numbered (what its dependencies' maps need).
    shapes: Vec<InstanceShape>,
    requires: Vec<AttrMask>,
    /// Consumers of each task and how they wait.
    consumers: Vec<Vec<(usize, DependencyKind)>>,
    /// Producer instances (or all-to-all producer tasks) each instance still waits for.
    waiting: Vec<u32>,
    /// Unfinished instances per task.
    task_left: Vec<u32>,
    state: Vec<State>,
    finished: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting,
    Ready,
    Finished,
    /// Will not run (the runtime cancelled it): never ready again.
    Withdrawn,
}

impl InstanceGraph {
    /// The graph of `workflow`; `requires[t]` is task t's attribute mask.
    pub fn new(workflow: &Workflow, requires: &[AttrMask]) -> Self {
        let mut offset = Vec::with_capacity(workflow.tasks.len() + 1);
        let mut total: u32 = 0;
        for t in &workflow.tasks {
            offset.push(total);
            total = total.saturating_add(t.instances().min(u32::MAX as u64) as u32);
        }
        offset.push(total);
        let mut consumers = vec![Vec::new(); workflow.tasks.len()];
        let mut waiting = vec![0u32; total as usize];
        for (c, t) in workflow.tasks.iter().enumerate() {
            let first = offset[c] as usize;
            for (k, w) in waiting[first..offset[c + 1] as usize]
                .iter_mut()
                .enumerate()
            {
                *w = t
                    .depends_on
                    .iter()
                    .map(|d| match d.kind {
                        // Counted once per producer task (see the module doc).
                        DependencyKind::All => 1,
                        _ => workflow.producers_of(c, d, k as u64).count() as u32,
                    })
                    .sum();
            }
            for d in &t.depends_on {
                consumers[d.producer].push((c, d.kind));
            }
        }
        Self {
            shapes: workflow.tasks.iter().map(|t| t.shape()).collect(),
            requires: (0..workflow.tasks.len())
                .map(|t| requires.get(t).copied().unwrap_or(0))
                .collect(),
            task_left: (0..workflow.tasks.len())
                .map(|t| offset[t + 1] - offset[t])
                .collect(),
            consumers,
            waiting,
            state: vec![State::Waiting; total as usize],
            finished: 0,
            offset,
        }
    }

    /// Number of instances.
    pub fn len(&self) -> u32 {
        *self.offset.last().unwrap_or(&0)
    }

    /// Whether the workflow has no instances.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Instances finished so far.
    pub fn finished(&self) -> u64 {
        self.finished
    }

    /// Whether every instance finished.
    pub fn all_finished(&self) -> bool {
        self.finished == self.len() as u64
    }

    /// (task, index within the task) of an instance.
    pub fn task_of(&self, id: InstanceId) -> (usize, u32) {
        let t = self
            .offset
            .partition_point(|&o| o <= id.0)
            .saturating_sub(1);
        (t, id.0 - self.offset[t])
    }

    /// The instance as it travels in a request.
    pub fn wanted(&self, id: InstanceId) -> Wanted {
        Wanted {
            instance: id,
            requires: self.requires[self.task_of(id).0],
        }
    }

    /// Every instance whose producers are all finished at the start, marked ready, in id order.
    pub fn start(&mut self) -> Vec<InstanceId> {
        let mut ready = Vec::new();
        for i in 0..self.len() {
            if self.waiting[i as usize] == 0 && self.state[i as usize] == State::Waiting {
                self.state[i as usize] = State::Ready;
                ready.push(InstanceId(i));
            }
        }
        ready
    }

    /// Withdraws `id` (a runtime's cancel): it is never made ready again, so its producers'
    /// results no longer ready it. Returns whether it was ready (then a machine holding it in
    /// a queue drops it). A finished instance stays finished.
    pub fn withdraw(&mut self, id: InstanceId) -> bool {
        match self.state.get_mut(id.0 as usize) {
            Some(s @ (State::Waiting | State::Ready)) => {
                let was_ready = *s == State::Ready;
                *s = State::Withdrawn;
                was_ready
            }
            _ => false,
        }
    }

    /// Puts `id` back into the workflow (a runtime's resubmit of an instance that failed for
    /// good or was not run): a withdrawn instance is ready again if every producer it waits for
    /// has finished, else it waits for them. Returns whether it is ready now — also when it
    /// was never withdrawn and is still ready (it failed while the graph counted it handed
    /// out). A finished or waiting instance stays as it is.
    pub fn reinstate(&mut self, id: InstanceId) -> bool {
        let i = id.0 as usize;
        match self.state.get(i) {
            Some(State::Withdrawn) => {
                let ready = self.waiting[i] == 0;
                self.state[i] = if ready { State::Ready } else { State::Waiting };
                ready
            }
            Some(State::Ready) => true,
            _ => false,
        }
    }

    /// Records that `id` finished; returns the instances this makes ready, in id order.
    pub fn finish(&mut self, id: InstanceId) -> Result<Vec<InstanceId>, GraphError> {
        let i = id.0 as usize;
        match self.state.get(i) {
            None => return Err(GraphError::Unknown(id.0)),
            Some(State::Finished) => return Err(GraphError::FinishedTwice(id.0)),
            Some(State::Waiting) => return Err(GraphError::NotReady(id.0)),
            Some(State::Withdrawn) => return Err(GraphError::Withdrawn(id.0)),
            Some(State::Ready) => {}
        }
        self.state[i] = State::Finished;
        self.finished += 1;
        let (t, index) = self.task_of(id);
        self.task_left[t] -= 1;
        let mut ready = Vec::new();
        for k in 0..self.consumers[t].len() {
            let (c, kind) = self.consumers[t][k];
            if kind == DependencyKind::All && self.task_left[t] > 0 {
                continue;
            }
            for j in kind.consumers_of(u64::from(index), self.shapes[t], self.shapes[c]) {
                let j = self.offset[c] as usize + j as usize;
                let w = &mut self.waiting[j];
                *w = w.saturating_sub(1);
                if *w == 0 && self.state[j] == State::Waiting {
                    self.state[j] = State::Ready;
                    ready.push(InstanceId(j as u32));
                }
            }
        }
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::workflow::parse_workflow;

    fn graph(text: &str) -> InstanceGraph {
        let w = parse_workflow("wf.toml", text)
            .unwrap_or_else(|e| panic!("{e}"))
            .workflow;
        InstanceGraph::new(&w, &[0; 8])
    }

    #[test]
    fn a_withdrawn_instance_is_never_made_ready() {
        let mut g = graph(
            "[[task]]\nname = \"A\"\ninstances = \"1..=2\"\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = \"1..=2\"\ncost = \"1s\"\ninputs = [\"m\"]\n",
        );
        assert_eq!(g.start(), [InstanceId(0), InstanceId(1)]);
        assert!(!g.withdraw(InstanceId(2)), "B1 was waiting");
        assert!(g.withdraw(InstanceId(1)), "A2 was ready");
        assert_eq!(g.finish(InstanceId(0)), Ok(vec![]), "B1 withdrawn");
        assert_eq!(g.finish(InstanceId(1)), Err(GraphError::Withdrawn(1)));
        assert!(
            !g.withdraw(InstanceId(0)),
            "a finished instance stays finished"
        );
        assert_eq!(g.finish(InstanceId(0)), Err(GraphError::FinishedTwice(0)));
    }

    #[test]
    fn a_reinstated_instance_is_ready_once_its_producers_finished() {
        let mut g = graph(
            "[[task]]\nname = \"A\"\ninstances = \"1..=2\"\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = \"1..=2\"\ncost = \"1s\"\ninputs = [\"m\"]\n",
        );
        assert_eq!(g.start(), [InstanceId(0), InstanceId(1)]);
        // A1 failed for good (withdrawn with B1), A2 failed while still counted ready.
        assert!(g.withdraw(InstanceId(0)));
        assert!(!g.withdraw(InstanceId(2)));
        assert!(g.reinstate(InstanceId(0)), "A1 waits for nothing");
        assert!(!g.reinstate(InstanceId(2)), "B1 waits for A1");
        assert!(g.reinstate(InstanceId(1)), "A2 is still ready");
        assert_eq!(
            g.finish(InstanceId(0)),
            Ok(vec![InstanceId(2)]),
            "B1 ready again"
        );
        assert!(
            !g.reinstate(InstanceId(0)),
            "a finished instance stays finished"
        );
        assert_eq!(g.finish(InstanceId(0)), Err(GraphError::FinishedTwice(0)));
    }

    #[test]
    fn a_b_of_one_process_waits_for_the_four_processes_of_a_i() {
        let mut g = graph(
            "[[task]]\nname = \"A\"\ninstances = \"1..=10\"\nprocesses = 4\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = \"1..=10\"\ncost = \"1s\"\ninputs = [\"m\"]\n",
        );
        assert_eq!(g.len(), 50);
        assert_eq!(g.start().len(), 40, "all of A is ready at the start");
        // A's instances for argument 3 are 8..12; B for argument 3 is 40 + 2.
        for p in 8..11 {
            assert_eq!(g.finish(InstanceId(p)), Ok(vec![]));
        }
        assert_eq!(g.finish(InstanceId(11)), Ok(vec![InstanceId(42)]));
        assert_eq!(g.task_of(InstanceId(42)), (1, 2));
        assert_eq!(g.finish(InstanceId(11)), Err(GraphError::FinishedTwice(11)));
        assert_eq!(g.finish(InstanceId(45)), Err(GraphError::NotReady(45)));
    }

    #[test]
    fn in_the_papers_loop_example_b_i_p_waits_for_a_i_p_only() {
        // Spec 05's XML: A `[p4]{1-10}`, B `[p4]{m*10}` with `<map>default</map>`: MPI process
        // p of B(i) consumes the `m` that process p of A(i) returned.
        let mut g = graph(
            "[[task]]\nname = \"A\"\ninstances = \"1..=10\"\nprocesses = 4\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = \"1..=10\"\nprocesses = 4\ncost = \"1s\"\ninputs = [\"m\"]\n",
        );
        assert_eq!(g.len(), 80);
        assert_eq!(g.start().len(), 40, "all of A is ready at the start");
        // A(3, rank 2) is 2 × 4 + 2 = 10; B(3, rank 2) is 40 + 10.
        assert_eq!(g.finish(InstanceId(10)), Ok(vec![InstanceId(50)]));
        assert_eq!(g.task_of(InstanceId(50)), (1, 10));
        for p in [8, 9, 11] {
            assert_eq!(
                g.finish(InstanceId(p)),
                Ok(vec![InstanceId(40 + p)]),
                "A(3, rank {}) readies B(3, rank {0}) alone",
                p - 8
            );
        }
    }

    #[test]
    fn with_other_processes_b_i_waits_for_every_process_of_a_i() {
        let mut g = graph(
            "[[task]]\nname = \"A\"\ninstances = \"1..=10\"\nprocesses = 4\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = \"1..=10\"\nprocesses = 2\ncost = \"1s\"\ninputs = [\"m\"]\n",
        );
        assert_eq!(g.start().len(), 40);
        for p in 8..11 {
            assert_eq!(g.finish(InstanceId(p)), Ok(vec![]));
        }
        // B(3) is 40 + 2 × 2 and 40 + 2 × 2 + 1.
        assert_eq!(
            g.finish(InstanceId(11)),
            Ok(vec![InstanceId(44), InstanceId(45)])
        );
    }

    #[test]
    fn an_all_to_all_consumer_waits_for_the_last_producer() {
        let mut g = graph(
            "[[task]]\nname = \"A\"\ninstances = 3\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = 2\ncost = \"1s\"\ninputs = [\"m\"]\n",
        );
        assert_eq!(g.start(), vec![InstanceId(0), InstanceId(1), InstanceId(2)]);
        assert_eq!(g.finish(InstanceId(2)), Ok(vec![]));
        assert_eq!(g.finish(InstanceId(0)), Ok(vec![]));
        assert_eq!(
            g.finish(InstanceId(1)),
            Ok(vec![InstanceId(3), InstanceId(4)])
        );
    }
}
