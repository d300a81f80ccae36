//! Tickets: the server's authorisation of one call between agents, which the agent token
//! (every agent holds it) cannot give. Two kinds, one encoding, domain-separated by label:
//!
//! - **Offload tickets** (spec 01's accelerator sharing). The server gives each ANode a key of
//!   its own (its heartbeat reply's `offload_key`) and signs every offload it assigns to an
//!   NNode with that ANode's key: the ticket (`Assignment.offload_ticket`, passed on as
//!   `OffloadTask.ticket`) is HMAC-SHA256 over [`TICKET_LABEL`], the task, the attempt, the
//!   account it runs as, the NNode's name and the ANode's name ([`Offload`]). An ANode runs an
//!   offload only when its key verifies the ticket for exactly what the call asks, so a ticket
//!   seen elsewhere runs nothing but that attempt, as that account, from that NNode, on that
//!   ANode.
//! - **Fetch tickets** (workflow data, issue 13). The server gives every node a data key of its
//!   own (`HeartbeatReply.data_key`) and signs each input it names in an assignment
//!   (`WorkflowInput.ticket`) with the producer's data key: HMAC-SHA256 over [`FETCH_LABEL`],
//!   the output's path, the producer's and the consumer's node names, the consumer's task and
//!   attempt ([`Fetch`]). The producer's agent serves an output (`AgentData.Fetch`) only when
//!   its key verifies the ticket the request carries for exactly that path, itself, and the
//!   consumer, task and attempt the request names: a ticket seen elsewhere reads that one file
//!   and nothing else.
//!
//! The keys are different (the server derives them with different labels), and so are the
//! labels the MACs start with: no offload ticket passes for a fetch ticket or the reverse.
//!
//! This module is the one encoding both sides use: [`sign`] on the server, [`verify`] (constant
//! time) on the agent that serves.

use ring::hmac;

/// Length of a key (an ANode's offload key, a node's data key) and of a ticket (HMAC-SHA256).
pub const LEN: usize = 32;

/// Domain separation: what a ticket's MAC covers starts with this, so no other MAC made with an
/// offload key can pass for a ticket.
pub const TICKET_LABEL: &[u8] = b"hetsched offload ticket v1";

/// Metadata an ANode puts on the `PermissionDenied` that refuses an offload for its ticket
/// (none, or one that does not match): the NNode then reports the attempt interrupted, not
/// failed — the task is not at fault, and the server runs it again with a fresh ticket.
pub const REFUSED_HEADER: &str = "x-hetsched-ticket-refused";

/// The offload a ticket authorises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offload<'a> {
    /// The task.
    pub task_id: u64,
    /// Its attempt.
    pub attempt: u32,
    /// The account it runs as (`TaskSpec.run_as`; empty: the agent's own).
    pub run_as: &'a str,
    /// The NNode that ships it.
    pub nnode: &'a str,
    /// The ANode that runs it.
    pub anode: &'a str,
}

/// Domain separation for fetch tickets: what a fetch ticket's MAC covers starts with this.
pub const FETCH_LABEL: &[u8] = b"hetsched fetch ticket v1";

/// Metadata an agent puts on the `Unavailable` that refuses a fetch because it holds no data
/// key from its server yet (it started moments ago and has not had a heartbeat reply): the
/// consumer's agent asks again for a few seconds before it reports the input unavailable —
/// the refusal says nothing about the output.
pub const NO_KEY_HEADER: &str = "x-hetsched-no-data-key";

/// The fetch of one workflow output a ticket authorises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetch<'a> {
    /// The output, relative to the producer's work directory (`wf/JOB/TASK-I/out/NAME`).
    pub path: &'a str,
    /// The node whose agent serves it (the producer's).
    pub producer: &'a str,
    /// The node whose agent fetches it (the consumer's).
    pub consumer: &'a str,
    /// The consuming instance's task.
    pub task_id: u64,
    /// Its attempt.
    pub attempt: u32,
}

/// What a ticket's MAC covers. Each kind starts with its own label, then its fields with a
/// fixed width or a length prefix, so that no two different calls encode alike
/// (`run_as = "ab", nnode = "c"` is not `run_as = "a", nnode = "bc"`).
pub trait Ticketed {
    /// The bytes the MAC covers.
    fn message(&self) -> Vec<u8>;
}

/// The one encoding of a ticket's message: a label, then fields appended in a fixed order.
struct Message(Vec<u8>);

impl Message {
    fn new(label: &[u8], capacity: usize) -> Self {
        let mut m = Vec::with_capacity(label.len() + capacity);
        m.extend_from_slice(label);
        Self(m)
    }

    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A string, after its length (8 bytes): where one field ends is never in doubt.
    fn str(self, s: &str) -> Self {
        let mut m = self.u64(s.len() as u64);
        m.0.extend_from_slice(s.as_bytes());
        m
    }
}

impl Ticketed for Offload<'_> {
    fn message(&self) -> Vec<u8> {
        Message::new(
            TICKET_LABEL,
            12 + 24 + self.run_as.len() + self.nnode.len() + self.anode.len(),
        )
        .u64(self.task_id)
        .u32(self.attempt)
        .str(self.run_as)
        .str(self.nnode)
        .str(self.anode)
        .0
    }
}

impl Ticketed for Fetch<'_> {
    fn message(&self) -> Vec<u8> {
        Message::new(
            FETCH_LABEL,
            24 + self.path.len() + self.producer.len() + self.consumer.len() + 12,
        )
        .str(self.path)
        .str(self.producer)
        .str(self.consumer)
        .u64(self.task_id)
        .u32(self.attempt)
        .0
    }
}

/// The ticket for `what` under `key` (the ANode's offload key, the producer's data key).
pub fn sign(key: &[u8], what: &impl Ticketed) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, &what.message()).as_ref().to_vec()
}

/// Whether `ticket` is `key`'s ticket for `what` (compared in constant time).
pub fn verify(key: &[u8], what: &impl Ticketed, ticket: &[u8]) -> bool {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::verify(&key, &what.message(), ticket).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; LEN] = [7; LEN];

    fn offload() -> Offload<'static> {
        Offload {
            task_id: 42,
            attempt: 2,
            run_as: "alice",
            nnode: "nnode-1",
            anode: "anode-1",
        }
    }

    #[test]
    fn a_ticket_verifies_for_its_offload_only() {
        let t = sign(&KEY, &offload());
        assert_eq!(t.len(), LEN);
        assert!(verify(&KEY, &offload(), &t));
        let others = [
            Offload {
                task_id: 43,
                ..offload()
            },
            Offload {
                attempt: 3,
                ..offload()
            },
            Offload {
                run_as: "",
                ..offload()
            },
            Offload {
                nnode: "nnode-2",
                ..offload()
            },
            Offload {
                anode: "anode-2",
                ..offload()
            },
            // The same bytes split differently between the fields.
            Offload {
                run_as: "alicen",
                nnode: "node-1",
                ..offload()
            },
        ];
        for o in others {
            assert!(!verify(&KEY, &o, &t), "{o:?}");
        }
        assert!(!verify(&[8; LEN], &offload(), &t), "another ANode's key");
        assert!(!verify(&KEY, &offload(), &t[..LEN - 1]), "truncated");
        assert!(!verify(&KEY, &offload(), &[]), "none");
    }

    /// The offload encoding is what it was before fetch tickets shared it: tickets signed by a
    /// server before the change still verify on agents after it, and the reverse.
    #[test]
    fn the_offload_encoding_is_unchanged() {
        let mut m = TICKET_LABEL.to_vec();
        m.extend_from_slice(&42u64.to_be_bytes());
        m.extend_from_slice(&2u32.to_be_bytes());
        for s in ["alice", "nnode-1", "anode-1"] {
            m.extend_from_slice(&(s.len() as u64).to_be_bytes());
            m.extend_from_slice(s.as_bytes());
        }
        assert_eq!(offload().message(), m);
    }

    fn fetch() -> Fetch<'static> {
        Fetch {
            path: "wf/7/P-0/out/x",
            producer: "a",
            consumer: "b",
            task_id: 42,
            attempt: 2,
        }
    }

    #[test]
    fn a_fetch_ticket_verifies_for_its_fetch_only() {
        let t = sign(&KEY, &fetch());
        assert_eq!(t.len(), LEN);
        assert!(verify(&KEY, &fetch(), &t));
        let others = [
            Fetch {
                path: "wf/7/P-0/out/y",
                ..fetch()
            },
            Fetch {
                producer: "c",
                ..fetch()
            },
            Fetch {
                consumer: "c",
                ..fetch()
            },
            Fetch {
                task_id: 43,
                ..fetch()
            },
            Fetch {
                attempt: 3,
                ..fetch()
            },
            // The same bytes split differently between the fields.
            Fetch {
                producer: "ab",
                consumer: "",
                ..fetch()
            },
        ];
        for f in others {
            assert!(!verify(&KEY, &f, &t), "{f:?}");
        }
        assert!(!verify(&[8; LEN], &fetch(), &t), "another node's key");
        assert!(!verify(&KEY, &fetch(), &t[..LEN - 1]), "truncated");
        assert!(!verify(&KEY, &fetch(), &[]), "none");
    }

    /// The labels keep the kinds apart: no message of one kind is a message of the other.
    #[test]
    fn no_offload_ticket_passes_for_a_fetch_ticket() {
        let o = offload().message();
        let f = fetch().message();
        assert!(o.starts_with(TICKET_LABEL) && f.starts_with(FETCH_LABEL));
        assert!(!TICKET_LABEL.starts_with(FETCH_LABEL) && !FETCH_LABEL.starts_with(TICKET_LABEL));
    }
}
