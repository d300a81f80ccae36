//! Fetch tickets (workflow data): every node's data key in its heartbeat replies, and the
//! ticket of each input an assignment names, signed with its producer's data key
//! ([`crate::tickets`]). The kinds make the dispatches without tickets: the keys stay here.
//! Likewise PCDDB grants: each allocation request a reply carries is signed here with its
//! workflow's balancing key, whose public half goes with the workflow's `PcddbJob`.

use super::State;
use crate::state::types::HeartbeatReply;

impl State {
    /// The data key of node `node` ([`crate::tickets`]): from its name and the identity its
    /// agent registered with.
    pub(super) fn data_key(&self, node: u32) -> Vec<u8> {
        let identity = self.nodes.get(node).map_or("", |n| n.identity.as_str());
        self.offload_keys.data_key(self.nodes.name(node), identity)
    }

    /// Gives node `node` its data key and signs every input of the reply's assignments for it,
    /// the consumer: under each producer's data key, over the output's path, the producer's
    /// and consumer's names, and the consuming task and attempt. The key goes in every reply,
    /// so an agent that restarted (it keeps no key) has it again at its next beat.
    pub(super) fn sign_fetches(&self, node: u32, reply: &mut HeartbeatReply) {
        reply.data_key = self.data_key(node);
        let consumer = self.nodes.name(node);
        for d in &mut reply.assignments {
            let Some(w) = d.workflow.as_mut() else {
                continue;
            };
            for input in &mut w.inputs {
                let producer = self.nodes.get(input.node_id);
                input.ticket = self.offload_keys.fetch_ticket(
                    producer.map_or("", |n| n.identity.as_str()),
                    &crate::tickets::Fetch {
                        path: &input.path,
                        producer: producer.map_or("", |n| n.spec.name.as_str()),
                        consumer,
                        task_id: d.task_id,
                        attempt: d.attempt,
                        // A workflow's inputs are its own outputs: the consumer's job's.
                        job_nonce: d.job_nonce,
                    },
                );
            }
        }
    }

    /// Signs the grant of every allocation request in `reply` with its workflow's balancing
    /// key, and gives the node the public half of the key of each PCDDB workflow it balances
    /// (the workflow kind sends a `PcddbJob` only to those nodes).
    pub(super) fn sign_grants(&self, reply: &mut HeartbeatReply) {
        for j in &mut reply.pcddb {
            j.balance_key = self
                .offload_keys
                .balance_key(j.job_id, j.epoch)
                .map_or_else(Vec::new, |k| k.public());
        }
        for env in &mut reply.balance {
            let job_id = env.job_id;
            if let Some(g) = env.grant.as_mut() {
                g.signature = self.offload_keys.grant(&crate::tickets::Grant {
                    job_id,
                    epoch: g.epoch,
                    serial: g.serial,
                    launch: g.launch,
                    cluster: g.cluster,
                    sent_at: g.sent_at,
                    instances: &g.instances,
                    requires: &g.requires,
                    table: &g.table,
                });
            }
        }
    }
}
