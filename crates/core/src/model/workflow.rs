//! Workflows: tasks of many component *instances* whose dependencies come from the data flow
//! (spec 05 §3). A task that consumes output `m` depends on the task that produces `m`
//! ([`DependencyKind`]): when both have the same argument range and the same `processes`,
//! instance *k* of the consumer depends only on instance *k* of the producer (the loop
//! `m = A(i); B(m)` of spec 05, process *p* of B(i) reading process *p* of A(i)'s `m`); the same
//! range with other `processes`, on every process of the producer's same argument value;
//! otherwise on every producer instance. [`DependencyKind::producers_of`] and
//! [`DependencyKind::consumers_of`] are the one place that map is written.
//!
//! The file format is parsed by [`crate::input::workflow`]; the balancers in
//! [`crate::policy::graph`] run the instances.

use crate::time::{NANOS_PER_SEC, Time};
use serde::{Deserialize, Serialize};
use std::ops::Range;

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

/// An inclusive range of integer arguments, `start..=end` (never empty). Unsigned, as every
/// index is where instances are addressed (`{index}`, `hetsched log JOB TASK:INDEX`, listings):
/// the parser refuses a negative value where it is written, so no value has to be mapped to
/// another one later (a `-1` once ran as `{index}` 0, beside the real 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgRange {
    /// First value.
    pub start: u32,
    /// Last value (inclusive), `>= start`.
    pub end: u32,
}

impl ArgRange {
    /// How many values.
    pub fn len(&self) -> u64 {
        u64::from(self.end.saturating_sub(self.start)) + 1
    }

    /// The value at position `k` (from 0): `start + k`, at most `end` (a `k` past the range,
    /// which no caller passes, reads as the last value rather than wrapping).
    pub fn value(&self, k: u32) -> u32 {
        self.start.saturating_add(k).min(self.end)
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

/// How a consumer's instances wait for one producer task. Instances are numbered value-major:
/// instance k of a task is argument value k / processes, process (rank) k % processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DependencyKind {
    /// Same argument range, different `processes`: the consumer's instances for argument *a*
    /// wait for the producer's instances for argument *a* (all its processes).
    InstanceWise,
    /// Different ranges: every consumer instance waits for every producer instance.
    All,
    /// Same argument range and same `processes` (spec 05's `<map>default</map>`): consumer
    /// instance k waits for producer instance k only. In the paper's loop
    /// `for i { m = A(i); B(m) }` inside a 4-process MPI program, process p of B(i) consumes
    /// the `m` that process p of A(i) returned, not its siblings'. (With one process on both
    /// sides this is also the instance-wise map; the parser keeps that kind then.)
    OneToOne,
}

/// How a task's instances are numbered: all a dependency's instance map needs of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstanceShape {
    /// Instances (argument values × processes).
    pub instances: u64,
    /// Processes per argument value (at least 1).
    pub processes: u32,
}

impl DependencyKind {
    /// The kind the data flow gives a consumer of `consumer` fed by `producer`: one-to-one for
    /// the same range and the same processes (more than one), instance-wise for the same range,
    /// else all-to-all. With one process on both sides the two maps are the same; that case
    /// stays instance-wise, the kind it always had, so exports and scripts reading it see no
    /// change.
    pub fn between(producer: &WorkflowTask, consumer: &WorkflowTask) -> Self {
        if producer.args != consumer.args {
            DependencyKind::All
        } else if producer.processes == consumer.processes && producer.processes > 1 {
            DependencyKind::OneToOne
        } else {
            DependencyKind::InstanceWise
        }
    }

    /// The producer's instances (indices within the producer task) that consumer instance `k`
    /// (an index within the consumer task) waits for.
    pub fn producers_of(
        self,
        k: u64,
        producer: InstanceShape,
        consumer: InstanceShape,
    ) -> Range<u64> {
        match self {
            DependencyKind::OneToOne => k..k + 1,
            DependencyKind::InstanceWise => {
                value_group(k / u64::from(consumer.processes.max(1)), producer.processes)
            }
            DependencyKind::All => 0..producer.instances,
        }
    }

    /// The consumer's instances (indices within the consumer task) that wait for producer
    /// instance `k` (an index within the producer task): the inverse of [`Self::producers_of`].
    pub fn consumers_of(
        self,
        k: u64,
        producer: InstanceShape,
        consumer: InstanceShape,
    ) -> Range<u64> {
        // Each map is symmetric in its two sides (the same number, the same argument value, or
        // everything), so the inverse is the same map with the roles swapped.
        self.producers_of(k, consumer, producer)
    }
}

/// The instances of the argument value at position `value` of a task of `processes` processes.
fn value_group(value: u64, processes: u32) -> Range<u64> {
    let n = u64::from(processes.max(1));
    value * n..(value + 1) * n
}

/// One producer a task waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    /// Index of the producer in [`Workflow::tasks`].
    pub producer: usize,
    /// The data items that flow from it (for reports and error messages).
    pub data: Vec<String>,
    /// Which producer instances each consumer instance waits for.
    pub kind: DependencyKind,
}

impl WorkflowTask {
    /// Number of instances: argument values × processes.
    pub fn instances(&self) -> u64 {
        self.args.len() * self.processes as u64
    }

    /// How its instances are numbered.
    pub fn shape(&self) -> InstanceShape {
        InstanceShape {
            instances: self.instances(),
            processes: self.processes,
        }
    }
}

impl Workflow {
    /// Total number of instances of every task.
    pub fn total_instances(&self) -> u64 {
        self.tasks.iter().map(WorkflowTask::instances).sum()
    }

    /// The instances of `dep`'s producer (indices within that task) that instance `k` of task
    /// `consumer` waits for.
    pub fn producers_of(&self, consumer: usize, dep: &Dependency, k: u64) -> Range<u64> {
        dep.kind.producers_of(
            k,
            self.tasks[dep.producer].shape(),
            self.tasks[consumer].shape(),
        )
    }

    /// The instances of task `consumer` that wait, through `dep`, for instance `k` of its
    /// producer.
    pub fn consumers_of(&self, consumer: usize, dep: &Dependency, k: u64) -> Range<u64> {
        dep.kind.consumers_of(
            k,
            self.tasks[dep.producer].shape(),
            self.tasks[consumer].shape(),
        )
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
    fn each_kind_maps_consumers_to_producers_and_back_the_same_way() {
        let shape = |values: u64, processes: u32| InstanceShape {
            instances: values * u64::from(processes),
            processes,
        };
        for (kind, pv, pp, cv, cp) in [
            (DependencyKind::OneToOne, 10, 4, 10, 4),
            (DependencyKind::OneToOne, 3, 1, 3, 1),
            (DependencyKind::InstanceWise, 10, 4, 10, 1),
            (DependencyKind::InstanceWise, 10, 2, 10, 3),
            (DependencyKind::All, 10, 4, 2, 3),
        ] {
            let (p, c) = (shape(pv, pp), shape(cv, cp));
            for k in 0..c.instances {
                let waits = kind.producers_of(k, p, c);
                // An independent statement of each map, by (value, rank).
                let expected: Vec<u64> = (0..p.instances)
                    .filter(|&j| match kind {
                        DependencyKind::OneToOne => j == k,
                        DependencyKind::InstanceWise => j / u64::from(pp) == k / u64::from(cp),
                        DependencyKind::All => true,
                    })
                    .collect();
                assert_eq!(waits.clone().collect::<Vec<_>>(), expected, "{kind:?} {k}");
                for j in 0..p.instances {
                    assert_eq!(
                        kind.consumers_of(j, p, c).contains(&k),
                        waits.contains(&j),
                        "{kind:?}: producer {j}, consumer {k}"
                    );
                }
            }
        }
        // The paper's loop: B(3, rank 2) waits for A(3, rank 2) alone.
        assert_eq!(
            DependencyKind::OneToOne.producers_of(10, shape(10, 4), shape(10, 4)),
            10..11
        );
    }

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
