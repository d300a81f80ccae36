//! Who may talk to a worker. A worker's listener accepts tuples, acks and executor state only
//! from the topology's other workers: every connection opens with a mutual challenge–response
//! over the topology's **worker key** (HMAC-SHA256), before any other frame is read.
//!
//! 1. The listener sends `Challenge(nl)` (32 random bytes).
//! 2. The connecting worker answers `Hello { worker, nonce: nc, proof }` with
//!    `proof = HMAC(key, "hello" ‖ nl ‖ nc ‖ worker)`.
//! 3. The listener checks the proof (in constant time) and answers
//!    `Welcome(HMAC(key, "welcome" ‖ nl ‖ nc ‖ worker))`, which the connecting worker checks
//!    before it sends anything — so tuples go only to a worker holding the key, not to whatever
//!    took over a departed worker's port.
//!
//! The key never travels: a passive listener on the network learns two MACs over fresh nonces,
//! which prove nothing on the next connection. The frames that follow are not encrypted; like
//! the rest of the runtime without TLS, use a trusted network for what tuples carry.
//!
//! An agent derives a topology's key from the agent token, which every agent of the cluster holds,
//! with [`topology_key`]: the topology's workers agree without the key being sent anywhere, a
//! resubmitted topology gets another key, and a program holding only the client token cannot
//! compute it.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// Bytes of a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a proof (an HMAC-SHA256 tag).
pub const PROOF_LEN: usize = 32;
/// The shortest worker key accepted, in bytes of its text.
pub const MIN_KEY_LEN: usize = 32;

/// A nonce.
pub type Nonce = [u8; NONCE_LEN];
/// A proof.
pub type Proof = [u8; PROOF_LEN];

/// The worker key of the topology `name` submitted at `submitted_ns` (ns since the Unix epoch),
/// derived from `secret` (the agent token): 64 hex digits.
pub fn topology_key(secret: &str, name: &str, submitted_ns: u64) -> String {
    let k = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut ctx = hmac::Context::with_key(&k);
    ctx.update(b"hetsched stream worker key v1\0");
    ctx.update(name.as_bytes());
    ctx.update(b"\0");
    ctx.update(&submitted_ns.to_be_bytes());
    ctx.sign()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fresh random nonce.
pub fn nonce() -> std::io::Result<Nonce> {
    let mut n = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut n)
        .map_err(|_| std::io::Error::other("the system's random number generator failed"))?;
    Ok(n)
}

/// The two sides' proofs over one connection's nonces.
pub struct Handshake {
    key: hmac::Key,
}

impl Handshake {
    /// The handshake under worker key `key`.
    pub fn new(key: &str) -> Self {
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes()),
        }
    }

    fn message(role: &[u8], listener: &Nonce, connector: &Nonce, worker: u32) -> Vec<u8> {
        let mut m = Vec::with_capacity(role.len() + 2 * NONCE_LEN + 4);
        m.extend_from_slice(role);
        m.extend_from_slice(listener);
        m.extend_from_slice(connector);
        m.extend_from_slice(&worker.to_be_bytes());
        m
    }

    fn sign(&self, message: &[u8]) -> Proof {
        let mut p = [0u8; PROOF_LEN];
        p.copy_from_slice(hmac::sign(&self.key, message).as_ref());
        p
    }

    /// The connecting worker's proof.
    pub fn hello(&self, listener: &Nonce, connector: &Nonce, worker: u32) -> Proof {
        self.sign(&Self::message(b"hello", listener, connector, worker))
    }

    /// The listener's proof.
    pub fn welcome(&self, listener: &Nonce, connector: &Nonce, worker: u32) -> Proof {
        self.sign(&Self::message(b"welcome", listener, connector, worker))
    }

    /// Whether `proof` is the connecting worker's (compared in constant time).
    pub fn check_hello(
        &self,
        listener: &Nonce,
        connector: &Nonce,
        worker: u32,
        proof: &Proof,
    ) -> bool {
        self.check(b"hello", listener, connector, worker, proof)
    }

    /// Whether `proof` is the listener's (compared in constant time).
    pub fn check_welcome(
        &self,
        listener: &Nonce,
        connector: &Nonce,
        worker: u32,
        proof: &Proof,
    ) -> bool {
        self.check(b"welcome", listener, connector, worker, proof)
    }

    fn check(
        &self,
        role: &[u8],
        listener: &Nonce,
        connector: &Nonce,
        worker: u32,
        proof: &Proof,
    ) -> bool {
        let message = Self::message(role, listener, connector, worker);
        hmac::verify(&self.key, &message, proof).is_ok()
    }
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handshake { key: <hidden> }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_key_proves_either_side() {
        let a = Handshake::new(&topology_key("agent-token", "wc", 7));
        let b = Handshake::new(&topology_key("agent-token", "wc", 8));
        let (nl, nc) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let p = a.hello(&nl, &nc, 3);
        assert!(a.check_hello(&nl, &nc, 3, &p));
        assert!(!b.check_hello(&nl, &nc, 3, &p), "another submission's key");
        assert!(!a.check_hello(&nl, &nc, 4, &p), "another worker index");
        assert!(
            !a.check_hello(&[9; NONCE_LEN], &nc, 3, &p),
            "a replay on a new challenge"
        );
        assert!(!a.check_welcome(&nl, &nc, 3, &p), "a hello is no welcome");
        let w = a.welcome(&nl, &nc, 3);
        assert!(a.check_welcome(&nl, &nc, 3, &w));
        assert!(!b.check_welcome(&nl, &nc, 3, &w));
    }

    #[test]
    fn a_key_depends_on_the_secret_the_name_and_the_submission() {
        let k = topology_key("s", "wc", 1);
        assert_eq!(k.len(), 64);
        assert!(k.len() >= MIN_KEY_LEN);
        assert_eq!(k, topology_key("s", "wc", 1), "deterministic");
        assert_ne!(k, topology_key("t", "wc", 1));
        assert_ne!(k, topology_key("s", "wc2", 1));
        assert_ne!(k, topology_key("s", "wc", 2));
        assert_ne!(nonce().expect("random"), nonce().expect("random"));
    }
}
