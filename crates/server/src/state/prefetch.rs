//! Prefetch (issue 10): a node may be handed batch tasks beyond its free cores, up to
//! `prefetch` cores' worth, which its agent holds in a queue and starts itself as soon as a
//! running task ends. One heartbeat then carries many results and many assignments, so the
//! server's per-heartbeat cost (an RPC, a transaction, a WAL sync) is spread over more tasks,
//! and the agent need not ask the server before refilling a slot.
//!
//! The batch policy is not changed: while it decides for a heartbeating node it sees that node
//! with `prefetch` more free cores ([`Prefetch::open`]); afterwards the extra cores are taken
//! back ([`Prefetch::close`]). A task placed beyond the node's real free cores is marked
//! `prefetched` and books its resources in the view like any running task, so the node shows no
//! free core until its queue has drained. Cores the policy booked beyond the node's capacity
//! are a debt, repaid out of the next cores released on that node
//! ([`Prefetch::repay_all`]), so the view never shows a free core the node does not have when a
//! policy looks at it.
//!
//! Durability and exactly-once are those of any running task: a prefetched task is recorded as
//! running on its node before the reply leaves; the agent lists it among its running tasks; if
//! the node dies (or the agent restarts, forgetting its queue) the server re-queues it like a
//! running task that vanished, and the agent never starts a task the server took back.

use hetsched_core::{AppId, Assignment, NodeId, SchedulerView, Variant};

/// The prefetch allowance and each node's debt (see the module documentation).
#[derive(Debug, Default)]
pub struct Prefetch {
    /// Cores' worth of tasks a node may be handed beyond its free cores (0 = none).
    cores: u32,
    /// Per node: cores booked in the view beyond the node's capacity, not yet repaid.
    debt: Vec<u32>,
}

/// What [`Prefetch::open`] lent a node for one policy decision.
#[derive(Clone, Copy, Debug, Default)]
pub struct Credit {
    /// The node's real free cores before the loan: tasks placed beyond them are prefetched.
    pub free: u32,
    /// Cores lent.
    pub lent: u32,
}

impl Prefetch {
    /// An allowance of `cores` per node.
    pub fn new(cores: u32) -> Self {
        Prefetch {
            cores,
            debt: Vec::new(),
        }
    }

    /// The allowance per node.
    pub fn cores(&self) -> u32 {
        self.cores
    }

    /// Cores node `node` still owes.
    pub fn debt(&self, node: NodeId) -> u32 {
        self.debt.get(node.index()).copied().unwrap_or(0)
    }

    fn add_debt(&mut self, node: NodeId, cores: u32) {
        if cores == 0 {
            return;
        }
        if self.debt.len() <= node.index() {
            self.debt.resize(node.index() + 1, 0);
        }
        self.debt[node.index()] += cores;
    }

    /// Takes every node's debt out of the cores released on it since (free cores the node does
    /// not really have).
    pub fn repay_all(&mut self, view: &mut SchedulerView) {
        for (n, debt) in self.debt.iter_mut().enumerate() {
            if *debt > 0 {
                *debt -= view.hold_cores(NodeId(n as u32), *debt);
            }
        }
    }

    /// Lends node `node` the allowance for one policy decision.
    pub fn open(&mut self, view: &mut SchedulerView, node: NodeId) -> Credit {
        self.repay_all(view);
        let free = view.node(node).free.cores;
        // A node that still owes cores gets no loan: its queue is full.
        let lent = if self.debt(node) > 0 { 0 } else { self.cores };
        view.release_cores(node, lent);
        Credit { free, lent }
    }

    /// Takes the loan back after the decision; what the policy used of it becomes debt.
    pub fn close(&mut self, view: &mut SchedulerView, node: NodeId, credit: Credit) {
        let taken = view.hold_cores(node, credit.lent);
        self.add_debt(node, credit.lent - taken);
    }

    /// Running task `a` is being put back into the view after a restart: what of its cores does
    /// not fit in the node's free cores was prefetched, and is debt.
    pub fn restoring(&mut self, view: &SchedulerView, a: &Assignment) {
        let Some(n) = view.nodes().get(a.node.index()) else {
            return;
        };
        let cores = cores_of(view, a.app, a.variant);
        self.add_debt(a.node, cores.saturating_sub(n.free.cores));
    }
}

/// The cores one task of `app` as `variant` takes (0 if the view does not know it).
pub fn cores_of(view: &SchedulerView, app: AppId, variant: Variant) -> u32 {
    view.apps()
        .get(app.index())
        .and_then(|a| a.app.request(variant))
        .map_or(0, |r| r.cores)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::{Node, Resources};

    fn view(cores: u32) -> SchedulerView {
        let mut v = SchedulerView::new();
        v.add_node(Node {
            id: NodeId(0),
            name: "n0".into(),
            rack: hetsched_core::RackId(0),
            cores,
            core_speed: 1.0,
            memory_bytes: 1 << 30,
            disk_read_bw: 1e8,
            net_bw: 1e8,
            net_latency: 0,
            accelerators: Vec::new(),
        })
        .expect("node");
        v
    }

    #[test]
    fn a_used_loan_is_repaid_out_of_the_next_released_cores() {
        let mut v = view(4);
        let mut p = Prefetch::new(4);
        let c = p.open(&mut v, NodeId(0));
        assert_eq!((c.free, c.lent), (4, 4));
        assert_eq!(v.node(NodeId(0)).free.cores, 8);
        // The policy places six one-core tasks: two beyond the node's cores.
        let one = Resources {
            cores: 6,
            ..Default::default()
        };
        v.book(NodeId(0), one).expect("fits in the loan");
        p.close(&mut v, NodeId(0), c);
        assert_eq!(v.node(NodeId(0)).free.cores, 0);
        assert_eq!(p.debt(NodeId(0)), 2);
        // No loan while in debt.
        let c = p.open(&mut v, NodeId(0));
        assert_eq!(c.lent, 0);
        p.close(&mut v, NodeId(0), c);
        // Three cores come back: two repay the debt, one is really free.
        v.unbook(
            NodeId(0),
            Resources {
                cores: 3,
                ..Default::default()
            },
            &[],
        );
        p.repay_all(&mut v);
        assert_eq!(p.debt(NodeId(0)), 0);
        assert_eq!(v.node(NodeId(0)).free.cores, 1);
    }

    #[test]
    fn without_an_allowance_nothing_changes() {
        let mut v = view(4);
        let mut p = Prefetch::new(0);
        let c = p.open(&mut v, NodeId(0));
        assert_eq!(v.node(NodeId(0)).free.cores, 4);
        p.close(&mut v, NodeId(0), c);
        assert_eq!(v.node(NodeId(0)).free.cores, 4);
        assert_eq!(p.debt(NodeId(0)), 0);
    }
}
