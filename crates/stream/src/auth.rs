//! Who may talk to a worker. A worker's listener accepts tuples, acks and executor state only
//! from the topology's other workers: every connection opens with a mutual challenge–response
//! over the topology's **worker key** (HMAC-SHA256), before any other frame is read.
//!
//! 1. The listener sends `Challenge(nl)` (32 random bytes).
//! 2. The connecting worker answers `Hello { worker, nonce: nc, proof }` with
//!    `proof = HMAC(key, "hello" ‖ nl ‖ nc ‖ worker ‖ binding)`, where `binding` is the TLS
//!    session's exporter value when the channel is TLS ([`crate::channel`]), zeros otherwise.
//! 3. The listener checks the proof (in constant time) and answers
//!    `Welcome(HMAC(key, "welcome" ‖ nl ‖ nc ‖ worker ‖ binding))`, which the connecting worker
//!    checks before it sends anything — so tuples go only to a worker holding the key, not to
//!    whatever took over a departed worker's port.
//!
//! The key never travels: a passive listener on the network learns two MACs over fresh nonces,
//! which prove nothing on the next connection (nor, over TLS, on another session). On plain TCP
//! the frames that follow are not encrypted; a cluster that runs TLS encrypts them
//! ([`crate::channel`]).
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

/// What one connection's proofs cover.
#[derive(Clone, Copy, Debug)]
pub struct Transcript {
    /// The listener's nonce (its challenge).
    pub listener: Nonce,
    /// The connecting worker's nonce.
    pub connector: Nonce,
    /// The connecting worker's index.
    pub worker: u32,
    /// The channel's binding ([`crate::channel::Conn::binding`]): the TLS session's exporter
    /// value, or zeros on plain TCP.
    pub binding: crate::channel::Binding,
}

/// The two sides' proofs under one worker key.
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

    fn message(role: &[u8], t: &Transcript) -> Vec<u8> {
        let mut m = Vec::with_capacity(role.len() + 3 * NONCE_LEN + 4);
        m.extend_from_slice(role);
        m.extend_from_slice(&t.listener);
        m.extend_from_slice(&t.connector);
        m.extend_from_slice(&t.worker.to_be_bytes());
        m.extend_from_slice(&t.binding);
        m
    }

    fn sign(&self, role: &[u8], t: &Transcript) -> Proof {
        let mut p = [0u8; PROOF_LEN];
        p.copy_from_slice(hmac::sign(&self.key, &Self::message(role, t)).as_ref());
        p
    }

    fn check(&self, role: &[u8], t: &Transcript, proof: &Proof) -> bool {
        hmac::verify(&self.key, &Self::message(role, t), proof).is_ok()
    }

    /// The connecting worker's proof.
    pub fn hello(&self, t: &Transcript) -> Proof {
        self.sign(b"hello", t)
    }

    /// The listener's proof.
    pub fn welcome(&self, t: &Transcript) -> Proof {
        self.sign(b"welcome", t)
    }

    /// Whether `proof` is the connecting worker's (compared in constant time).
    pub fn check_hello(&self, t: &Transcript, proof: &Proof) -> bool {
        self.check(b"hello", t, proof)
    }

    /// Whether `proof` is the listener's (compared in constant time).
    pub fn check_welcome(&self, t: &Transcript, proof: &Proof) -> bool {
        self.check(b"welcome", t, proof)
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
    fn only_the_same_key_over_the_same_channel_proves_either_side() {
        let a = Handshake::new(&topology_key("agent-token", "wc", 7));
        let b = Handshake::new(&topology_key("agent-token", "wc", 8));
        let t = Transcript {
            listener: [1; NONCE_LEN],
            connector: [2; NONCE_LEN],
            worker: 3,
            binding: [5; 32],
        };
        let p = a.hello(&t);
        assert!(a.check_hello(&t, &p));
        assert!(!b.check_hello(&t, &p), "another submission's key");
        let other = |f: &dyn Fn(&mut Transcript)| {
            let mut u = t;
            f(&mut u);
            u
        };
        assert!(
            !a.check_hello(&other(&|u| u.worker = 4), &p),
            "another worker index"
        );
        assert!(
            !a.check_hello(&other(&|u| u.listener = [9; NONCE_LEN]), &p),
            "a replay on a new challenge"
        );
        assert!(
            !a.check_hello(&other(&|u| u.binding = [6; 32]), &p),
            "a proof relayed onto another TLS session"
        );
        assert!(!a.check_welcome(&t, &p), "a hello is no welcome");
        let w = a.welcome(&t);
        assert!(a.check_welcome(&t, &w));
        assert!(!b.check_welcome(&t, &w));
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
