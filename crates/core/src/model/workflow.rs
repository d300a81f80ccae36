//! Workflows: tasks of many component *instances* whose dependencies come from the data flow
//! (spec 05 §3). A task that consumes output `m` depends on the task that produces `m`; when both
//! have the same argument range, instance *a* of the consumer depends only on instance *a* of the
//! producer (the loop `m = A(i); B(m)` of spec 05), otherwise on every producer instance.
//!
//! The file format is parsed by [`crate::input::workflow`]; the balancers in
//! [`crate::policy::graph`] run the instances.

use crate::time::{NANOS_PER_SEC, Time};
use serde::{Deserialize, Serialize};

/// A whole workflow: tasks in file order, dependencies already derived and checked acyclic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    /// Tasks in file order; [`Dependency::producer`] indexes this list.
    pub tasks: Vec<WorkflowTask>,
}

/// One task: a component call repeated over an argument range (and MPI-style processes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkflowTask {
    /// Unique name.
    pub name: String,
    /// Component it belongs to (reports only).
    pub component: Option<String>,
    /// The argument values; one instance group per value.
    pub args: ArgRange,
    /// Processes per argument value (spec 05's `[p4]`): instances = values × processes.
    pub processes: u32,
    /// Work of one instance on a core of speed 1.0.
    pub cost: Cost,
    /// Node attributes an instance needs (e.g. `gpu`); only nodes with all of them accept it.
    pub requires: Vec<String>,
    /// Data items consumed.
    pub inputs: Vec<String>,
    /// Data items produced.
    pub outputs: Vec<String>,
    /// Producers this task waits for, one entry per producer task (in first-input order).
    pub depends_on: Vec<Dependency>,
}

/// An inclusive range of integer arguments, `start..=end` (never empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgRange {
    /// First value.
    pub start: i64,
    /// Last value (inclusive), `>= start`.
    pub end: i64,
}

impl ArgRange {
    /// How many values.
    pub fn len(&self) -> u64 {
        (self.end - self.start) as u64 + 1
    }

    /// Never true: a range holds at least one value (kept for the `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Work of one instance on a core of speed 1.0.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Cost {
    /// Every instance costs the same.
    Fixed(Time),
    /// Lognormal with this mean and coefficient of variation (sampled by the driver, seeded).
    LogNormal {
        /// Mean cost.
        mean: Time,
        /// Standard deviation / mean.
        cv: f64,
    },
}

impl Cost {
    /// The mean cost.
    pub fn mean(&self) -> Time {
        match *self {
            Cost::Fixed(t) | Cost::LogNormal { mean: t, .. } => t,
        }
    }

    /// One instance's cost given a standard-normal draw `z` from the driver's seeded generator.
    /// Lognormal: σ² = ln(1 + cv²), μ = ln(mean) − σ²/2, so the mean is preserved.
    pub fn sample(&self, z: f64) -> Time {
        match *self {
            Cost::Fixed(t) => t,
            Cost::LogNormal { mean, cv } => {
                if mean == 0 || cv <= 0.0 {
                    return mean;
                }
                let sigma2 = (1.0 + cv * cv).ln();
                let mu = (mean as f64 / NANOS_PER_SEC as f64).ln() - sigma2 / 2.0;
                crate::time::secs((mu + sigma2.sqrt() * z).exp())
            }
        }
    }
}

/// How a consumer's instances wait for one producer task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DependencyKind {
    /// Same argument range: the consumer's instances for argument *a* wait for the producer's
    /// instances for argument *a* (all its processes).
    InstanceWise,
    /// Different ranges: every consumer instance waits for every producer instance.
    All,
}

/// One producer a task waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    /// Index of the producer in [`Workflow::tasks`].
    pub producer: usize,
    /// The data items that flow from it (for reports and error messages).
    pub data: Vec<String>,
    /// Instance-wise or all-to-all.
    pub kind: DependencyKind,
}

impl WorkflowTask {
    /// Number of instances: argument values × processes.
    pub fn instances(&self) -> u64 {
        self.args.len() * self.processes as u64
    }
}

impl Workflow {
    /// Total number of instances of every task.
    pub fn total_instances(&self) -> u64 {
        self.tasks.iter().map(WorkflowTask::instances).sum()
    }

    /// The index of the task called `name`.
    pub fn task_index(&self, name: &str) -> Option<usize> {
        self.tasks.iter().position(|t| t.name == name)
    }

    /// Every requirement any task names, sorted and deduplicated.
    pub fn requirements(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .tasks
            .iter()
            .flat_map(|t| t.requires.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lognormal_keeps_its_median_below_the_mean() {
        let c = Cost::LogNormal {
            mean: 20 * NANOS_PER_SEC,
            cv: 0.5,
        };
        // z = 0 is the median, e^μ = mean / sqrt(1 + cv²).
        let median = c.sample(0.0) as f64 / NANOS_PER_SEC as f64;
        assert!((median - 20.0 / 1.25f64.sqrt()).abs() < 1e-6, "{median}");
        assert_eq!(Cost::Fixed(7).sample(3.0), 7);
    }
}
