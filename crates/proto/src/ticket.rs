//! Offload tickets (spec 01's accelerator sharing): the server's authorisation of one offload.
//!
//! Every agent holds the agent token, so the token alone cannot tell an ANode which offloads the
//! server assigned. The server therefore gives each ANode a key of its own (its heartbeat
//! reply's `offload_key`) and signs every offload it assigns to an NNode with that ANode's key:
//! the ticket (`Assignment.offload_ticket`, passed on as `OffloadTask.ticket`) is HMAC-SHA256
//! over [`TICKET_LABEL`], the task, the attempt, the account it runs as, the NNode's name and
//! the ANode's name. An ANode runs an offload only when its key verifies the ticket for exactly
//! what the call asks, so a ticket seen elsewhere runs nothing but that attempt, as that
//! account, from that NNode, on that ANode.
//!
//! This module is the one encoding both sides use: [`sign`] on the server, [`verify`] (constant
//! time) on the ANode.

use ring::hmac;

/// Length of an offload key and of a ticket (HMAC-SHA256).
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

impl Offload<'_> {
    /// What the MAC covers: the label, then each field with a fixed width or a length prefix,
    /// so that no two different offloads encode alike (`run_as = "ab", nnode = "c"` is not
    /// `run_as = "a", nnode = "bc"`).
    fn message(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(
            TICKET_LABEL.len() + 12 + 24 + self.run_as.len() + self.nnode.len() + self.anode.len(),
        );
        m.extend_from_slice(TICKET_LABEL);
        m.extend_from_slice(&self.task_id.to_be_bytes());
        m.extend_from_slice(&self.attempt.to_be_bytes());
        for s in [self.run_as, self.nnode, self.anode] {
            m.extend_from_slice(&(s.len() as u64).to_be_bytes());
            m.extend_from_slice(s.as_bytes());
        }
        m
    }
}

/// The ticket for `offload` under the ANode's `key`.
pub fn sign(key: &[u8], offload: &Offload) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, &offload.message()).as_ref().to_vec()
}

/// Whether `ticket` is the ANode's `key`'s ticket for `offload` (compared in constant time).
pub fn verify(key: &[u8], offload: &Offload, ticket: &[u8]) -> bool {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::verify(&key, &offload.message(), ticket).is_ok()
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
}
