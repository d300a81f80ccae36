//! Offload tickets, the server's side (spec 01's accelerator sharing; the encoding is
//! [`hetsched_proto::ticket`]'s).
//!
//! Every agent holds the agent token, so an ANode's accelerator service cannot tell from it
//! whether the server assigned the offload a caller asks for. The server keeps a secret of its
//! own (`DATA_DIR/offload-secret`, [`crate::datadir::offload_secret`]) and derives from it one
//! key per ANode — HMAC-SHA256 over [`KEY_LABEL`], the ANode's name and the identity its agent
//! registered with — which only that ANode is told (its heartbeat replies' `offload_key`).
//! Every assignment it sends an NNode with `offload_anode` set carries the ticket of that
//! attempt under that ANode's key ([`OffloadKeys::ticket`]); the ANode runs only offloads whose
//! ticket its key verifies.
//!
//! The identity is part of the key so that an agent that takes a dead ANode's name over (a new
//! identity) does not get the key tickets for the old one were signed with. The secret
//! persists, so a server restart changes no key: tickets of assignments sent before it still
//! verify.

use hetsched_proto::ticket;
use ring::hmac;

/// The offload a ticket authorises: the proto crate's, whose encoding both sides share (this
/// module is the server's one edge to it).
pub use hetsched_proto::ticket::Offload;

/// Domain separation for the derived keys: nothing else the server computes with its secret
/// can pass for an ANode's key.
pub const KEY_LABEL: &[u8] = b"hetsched anode offload key v1";

/// The server's offload secret, and the keys and tickets derived from it.
#[derive(Clone)]
pub struct OffloadKeys {
    secret: hmac::Key,
}

impl std::fmt::Debug for OffloadKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OffloadKeys(…)")
    }
}

impl OffloadKeys {
    /// Keys derived from `secret` (the data directory's `offload-secret`).
    pub fn new(secret: &[u8; 32]) -> Self {
        Self {
            secret: hmac::Key::new(hmac::HMAC_SHA256, secret),
        }
    }

    /// Keys from a secret drawn now and kept nowhere: a state without a data directory (tests,
    /// the demo's first moments) still signs every offload. Falls back to the `rand` generator
    /// if the system's fails.
    pub fn ephemeral() -> Self {
        let mut secret = [0u8; 32];
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret).is_err() {
            secret = rand::random();
        }
        Self::new(&secret)
    }

    /// The offload key of the ANode called `anode` whose agent registered with `identity`.
    pub fn key(&self, anode: &str, identity: &str) -> Vec<u8> {
        let mut m = Vec::with_capacity(KEY_LABEL.len() + 16 + anode.len() + identity.len());
        m.extend_from_slice(KEY_LABEL);
        for s in [anode, identity] {
            m.extend_from_slice(&(s.len() as u64).to_be_bytes());
            m.extend_from_slice(s.as_bytes());
        }
        hmac::sign(&self.secret, &m).as_ref().to_vec()
    }

    /// The ticket of `offload` under its ANode's key (the ANode's agent registered with
    /// `identity`).
    pub fn ticket(&self, identity: &str, offload: &Offload) -> Vec<u8> {
        ticket::sign(&self.key(offload.anode, identity), offload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_anode_and_identity_has_its_own_key_and_the_ticket_verifies_with_it() {
        let keys = OffloadKeys::new(&[1; 32]);
        let k = keys.key("anode-1", "id-a");
        assert_eq!(k.len(), ticket::LEN);
        assert_eq!(
            k,
            OffloadKeys::new(&[1; 32]).key("anode-1", "id-a"),
            "stable"
        );
        assert_ne!(k, keys.key("anode-2", "id-a"));
        assert_ne!(k, keys.key("anode-1", "id-b"));
        assert_ne!(k, OffloadKeys::new(&[2; 32]).key("anode-1", "id-a"));
        let o = Offload {
            task_id: 5,
            attempt: 1,
            run_as: "",
            nnode: "nnode-1",
            anode: "anode-1",
        };
        let t = keys.ticket("id-a", &o);
        assert!(ticket::verify(&k, &o, &t));
        assert!(!ticket::verify(&keys.key("anode-1", "id-b"), &o, &t));
    }
}
