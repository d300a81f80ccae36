//! Offload, fetch and log tickets and PCDDB grants, the server's side (spec 01's accelerator
//! sharing, workflow data, task output, spec 05's allocation requests; the encoding is
//! [`hetsched_proto::ticket`]'s).
//!
//! Every agent holds the agent token, so an ANode's accelerator service cannot tell from it
//! whether the server assigned the offload a caller asks for. The server keeps a secret of its
//! own (`DATA_DIR/offload-secret`, [`crate::datadir::offload_secret`]) and derives from it one
//! key per ANode and epoch — HMAC-SHA256 over [`KEY_LABEL`], the epoch, the ANode's name and
//! the identity its agent registered with — which only that ANode is told (its heartbeat
//! replies' `offload_keys`).
//!
//! Offload keys rotate: an epoch is the server's `[offload] key_rotation` ([`OffloadTiming`];
//! default [`OFFLOAD_KEY_PERIOD_MS`]) of the server's clock, each ticket
//! is signed with the key of the epoch it is issued in and names it, and every reply to an
//! ANode carries its keys of the previous, the current and the next epoch. A ticket of the
//! previous epoch still verifies until it expires (the period is longer than a ticket's
//! lifetime), the next epoch's key is there before the first ticket that needs it, and a key
//! older than that verifies nothing: a key taken from an ANode stops working within two
//! periods. The secret itself does not change (fetch, log and balancing keys are derived from
//! it as before); the epoch comes from the clock, so a restart neither changes nor needs a
//! stored epoch.
//! Every assignment it sends an NNode with `offload_anode` set carries the ticket of that
//! attempt under that ANode's key ([`OffloadKeys::ticket`]), which covers what it runs as the
//! NNode ships it ([`offload_runs`]); the ANode runs only offloads whose ticket its key verifies
//! for the spec the call brings.
//!
//! Fetch tickets (workflow data) work alike from the same secret: every node — not only ANodes
//! — gets a data key of its own (HMAC-SHA256 over [`DATA_KEY_LABEL`], its name and identity;
//! its heartbeat replies' `data_key`), and each input an assignment names carries the ticket of
//! that fetch under the producer's data key ([`OffloadKeys::fetch_ticket`]): the producer's
//! agent serves an output only to a fetch whose ticket its key verifies. The labels keep the
//! two kinds of keys apart: an ANode's offload key is not its data key.
//!
//! Log tickets (`hetsched log`) are signed with the same data keys ([`crate::logs`]).
//!
//! Grants (PCDDB) come from the same secret too, but are signatures: for each workflow and
//! launch-node epoch the server derives an Ed25519 key pair from a seed — HMAC-SHA256 over
//! [`BALANCE_KEY_LABEL`], the workflow's id and the epoch ([`OffloadKeys::balance_key`]) — signs
//! every allocation request it sends out with the private half, and tells the nodes balancing
//! the workflow the public half (`PcddbJob.balance_key`). An agent takes a request hopping from
//! another agent only when that key verifies its grant, so no agent — every one holds the agent
//! token, and every balancing one the public key — can make another take instances the launch
//! node did not grant. A key of another workflow or epoch (a restart, a rollback) verifies none
//! of this one's grants.
//!
//! Each offload ticket expires the server's `[offload] ticket_lifetime` (default
//! [`OFFLOAD_TICKET_LIFETIME_MS`]) after the server signs it (its
//! [`Validity`], signed in): an ANode starts no run with an expired ticket, and runs each
//! attempt once whatever calls bring its ticket (the agent's `accel::attempts`, which forgets
//! an attempt only once its ticket has expired).
//!
//! The identity is part of each key so that an agent that takes a dead node's name over (a new
//! identity) does not get the key tickets for the old one were signed with. The secret
//! persists, so a server restart changes no key: tickets of assignments sent before it still
//! verify.

use crate::state::types::{Dispatch, TaskSpec};
use hetsched_core::input::workflow_runtime::offloaded_instance;
use hetsched_proto::ticket;
use ring::hmac;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The call a ticket authorises: the proto crate's, whose encoding both sides share (this
/// module is the server's one edge to it).
pub use hetsched_proto::ticket::{Fetch, Grant, GrantKey, Offload, Validity};

/// How long an offload ticket starts runs after the server signed it, unless the server's
/// `[offload] ticket_lifetime` says otherwise ([`OffloadTiming`]). It must cover the time
/// from the assignment to the offload's first call on its ANode: the heartbeat reply, the wait
/// in the NNode agent's queue (a prefetched task waits there for cores), and the NNode's tries
/// of a transfer that breaks or finds the ANode without a key yet (a few seconds). A re-send of
/// an attempt the ANode holds needs no unexpired ticket — it starts no run, it takes over the
/// one there — so the run itself, however long, is not bounded by it. An hour leaves room for
/// queues and for clocks a little apart (the ANode reads the expiry by its own clock), and
/// bounds what an ANode remembers to the attempts of the last hour. An attempt whose ticket
/// expired before its ANode took it is refused and runs again with a fresh ticket (a lost
/// attempt).
pub const OFFLOAD_TICKET_LIFETIME_MS: u64 = 60 * 60 * 1000;

/// The digest of what an offload runs, which its ticket covers ([`Offload::runs`]).
pub type Runs = [u8; ticket::DIGEST_LEN];

/// What dispatch `d` of `spec` (its kind's, as made for the dispatch) runs on its ANode, run as
/// `run_as`: [`ticket::offload_digest`] over the spec as the NNode's agent ships it. A batch
/// task's is the spec as sent; a workflow instance's command and files are rewritten by the
/// NNode for the ANode (paths relative to the instance's directory), by the core's one rule
/// (`offloaded_instance`), applied here the same way.
pub fn offload_runs(spec: TaskSpec, run_as: &str, d: &Dispatch) -> Runs {
    let mut spec = crate::convert::task_spec(&spec);
    spec.run_as = run_as.to_string();
    if let Some(w) = &d.workflow {
        let names: Vec<&str> = w.inputs.iter().map(|i| i.name.as_str()).collect();
        let x = offloaded_instance(&spec.argv, d.index, w.process, &names, &w.outputs);
        spec.argv = x.argv;
        spec.inputs = x.inputs;
        spec.outputs = x.outputs;
        if let Some(p) = x.process {
            spec.env.insert("HETSCHED_PROCESS".into(), p);
        }
    }
    ticket::offload_digest(
        &spec,
        d.index,
        d.entry.as_deref(),
        u32::try_from(d.devices.len()).unwrap_or(u32::MAX),
    )
}

/// Domain separation for the derived keys: nothing else the server computes with its secret
/// can pass for an ANode's key. v2: one key per epoch.
pub const KEY_LABEL: &[u8] = b"hetsched anode offload key v2";

/// How long an offload key signs tickets unless the server's `[offload] key_rotation` says
/// otherwise: a day of the server's clock. Longer than a ticket's lifetime
/// ([`OFFLOAD_TICKET_LIFETIME_MS`]), so that the previous epoch's key, which an ANode still
/// holds, verifies every ticket that has not expired (the rule:
/// [`crate::config::OffloadConfig`]).
pub const OFFLOAD_KEY_PERIOD_MS: u64 = 24 * 60 * 60 * 1000;

/// The epoch of the offload keys at `now_ms` (ms since the Unix epoch) when they rotate every
/// `key_rotation_ms`.
pub fn key_epoch(now_ms: u64, key_rotation_ms: u64) -> u64 {
    now_ms / key_rotation_ms.max(1)
}

/// How long offload tickets start runs and how often offload keys rotate: the server's
/// `[offload]` table, checked at load ([`crate::config::ServerConfig::offload_timing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffloadTiming {
    /// A ticket's lifetime, from its signing (ms).
    pub ticket_lifetime_ms: u64,
    /// An epoch of the offload keys (ms).
    pub key_rotation_ms: u64,
}

impl Default for OffloadTiming {
    fn default() -> Self {
        Self {
            ticket_lifetime_ms: OFFLOAD_TICKET_LIFETIME_MS,
            key_rotation_ms: OFFLOAD_KEY_PERIOD_MS,
        }
    }
}

/// Domain separation for the nodes' data keys: a node's data key is neither its offload key
/// (an ANode's) nor anything else derived from the secret.
pub const DATA_KEY_LABEL: &[u8] = b"hetsched node data key v1";

/// Domain separation for the workflows' balancing keys (their Ed25519 seeds): no node's key,
/// nor anything else derived from the secret, is a balancing key's seed.
pub const BALANCE_KEY_LABEL: &[u8] = b"hetsched pcddb balance key v1";

/// Most balancing keys kept derived (one per running PCDDB workflow and epoch): past it the
/// cache starts over, and keys are derived again as they are used.
const BALANCE_KEYS_KEPT: usize = 256;

/// Balancing keys derived so far, by (workflow, epoch), shared by every clone of the keys.
type BalanceKeys = Arc<Mutex<HashMap<(u64, u64), Arc<GrantKey>>>>;

/// The server's offload secret, and the keys and tickets derived from it.
#[derive(Clone)]
pub struct OffloadKeys {
    secret: hmac::Key,
    /// Tickets' lifetime and keys' rotation period.
    timing: OffloadTiming,
    /// Balancing keys derived so far, by (workflow, epoch): a key pair costs a scalar
    /// multiplication, and every heartbeat names the key of each running PCDDB workflow.
    balance: BalanceKeys,
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
            timing: OffloadTiming::default(),
            balance: Arc::default(),
        }
    }

    /// These keys, signing tickets that live and rotating as `timing` says.
    pub fn with_timing(mut self, timing: OffloadTiming) -> Self {
        self.timing = timing;
        self
    }

    /// Tickets' lifetime and keys' rotation period.
    pub fn timing(&self) -> OffloadTiming {
        self.timing
    }

    /// The epoch of the offload keys at `now_ms`.
    pub fn epoch(&self, now_ms: u64) -> u64 {
        key_epoch(now_ms, self.timing.key_rotation_ms)
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

    /// The key `label` gives the node called `node` whose agent registered with `identity`.
    fn derive(&self, label: &[u8], node: &str, identity: &str) -> Vec<u8> {
        self.derive_after(label, &[], node, identity)
    }

    /// [`Self::derive`], with `prefix` after the label (an offload key's epoch).
    fn derive_after(&self, label: &[u8], prefix: &[u8], node: &str, identity: &str) -> Vec<u8> {
        let mut m =
            Vec::with_capacity(label.len() + prefix.len() + 16 + node.len() + identity.len());
        m.extend_from_slice(label);
        m.extend_from_slice(prefix);
        for s in [node, identity] {
            m.extend_from_slice(&(s.len() as u64).to_be_bytes());
            m.extend_from_slice(s.as_bytes());
        }
        hmac::sign(&self.secret, &m).as_ref().to_vec()
    }

    /// The offload key of epoch `epoch` of the ANode called `anode` whose agent registered with
    /// `identity`. Under a rotation period other than the default day the period is derived
    /// in too: epoch numbers of two periods name different times, and a key handed out for
    /// one must not verify under the other (the default's keys are those of before the period
    /// could be set).
    pub fn key(&self, anode: &str, identity: &str, epoch: u64) -> Vec<u8> {
        let period = self.timing.key_rotation_ms;
        let mut prefix = epoch.to_be_bytes().to_vec();
        if period != OFFLOAD_KEY_PERIOD_MS {
            prefix.extend_from_slice(&period.to_be_bytes());
        }
        self.derive_after(KEY_LABEL, &prefix, anode, identity)
    }

    /// The offload keys an ANode holds at `now_ms`: those of the previous, the current and the
    /// next epoch, by epoch.
    pub fn keys(&self, anode: &str, identity: &str, now_ms: u64) -> Vec<(u64, Vec<u8>)> {
        let now = self.epoch(now_ms);
        [now.saturating_sub(1), now, now.saturating_add(1)]
            .into_iter()
            .map(|e| (e, self.key(anode, identity, e)))
            .collect()
    }

    /// The ticket of `offload` under its ANode's key of the epoch of `now_ms` (the ANode's
    /// agent registered with `identity`), issued at `now_ms` (milliseconds since the Unix
    /// epoch): it starts runs for the configured lifetime ([`OffloadTiming`]).
    pub fn ticket(&self, identity: &str, offload: &Offload, now_ms: u64) -> Vec<u8> {
        let epoch = self.epoch(now_ms);
        let valid = Validity {
            issued_ms: now_ms,
            expires_ms: now_ms.saturating_add(self.timing.ticket_lifetime_ms),
            key_epoch: epoch,
        };
        ticket::seal_offload(&self.key(offload.anode, identity, epoch), offload, valid)
    }

    /// The data key of the node called `node` whose agent registered with `identity`.
    pub fn data_key(&self, node: &str, identity: &str) -> Vec<u8> {
        self.derive(DATA_KEY_LABEL, node, identity)
    }

    /// The ticket of `fetch` under its producer's data key (the producer's agent registered
    /// with `identity`).
    pub fn fetch_ticket(&self, identity: &str, fetch: &Fetch) -> Vec<u8> {
        ticket::sign(&self.data_key(fetch.producer, identity), fetch)
    }

    /// The balancing key of workflow `job_id` under the launch node built at `epoch`: an
    /// Ed25519 key pair whose seed is the HMAC of the secret over [`BALANCE_KEY_LABEL`], the
    /// workflow and the epoch. `None` never happens with a 32-byte seed; a caller then signs
    /// nothing, and agents refuse the requests of that workflow from other agents.
    pub fn balance_key(&self, job_id: u64, epoch: u64) -> Option<Arc<GrantKey>> {
        let mut kept = self.balance.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = kept.get(&(job_id, epoch)) {
            return Some(k.clone());
        }
        let mut m = Vec::with_capacity(BALANCE_KEY_LABEL.len() + 16);
        m.extend_from_slice(BALANCE_KEY_LABEL);
        m.extend_from_slice(&job_id.to_be_bytes());
        m.extend_from_slice(&epoch.to_be_bytes());
        let tag = hmac::sign(&self.secret, &m);
        let seed: &[u8; 32] = tag.as_ref().try_into().ok()?;
        let key = Arc::new(GrantKey::from_seed(seed)?);
        if kept.len() >= BALANCE_KEYS_KEPT {
            kept.clear();
        }
        kept.insert((job_id, epoch), key.clone());
        Some(key)
    }

    /// The grant of `grant` under its workflow's balancing key (empty in the impossible case
    /// that the key cannot be made: the agents refuse it).
    pub fn grant(&self, grant: &Grant) -> Vec<u8> {
        self.balance_key(grant.job_id, grant.epoch)
            .map_or_else(Vec::new, |k| k.sign(grant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offload the ticket tests sign: task 5's first attempt, from `nnode-1` to `anode-1`,
    /// as the agent's own account.
    fn offload_of_task_5() -> Offload<'static> {
        Offload {
            task_id: 5,
            attempt: 1,
            run_as: "",
            nnode: "nnode-1",
            anode: "anode-1",
            runs: [3; ticket::DIGEST_LEN],
        }
    }

    #[test]
    fn each_anode_and_identity_has_its_own_key_and_the_ticket_verifies_with_it() {
        let keys = OffloadKeys::new(&[1; 32]);
        let k = keys.key("anode-1", "id-a", 0);
        assert_eq!(k.len(), ticket::LEN);
        assert_eq!(
            k,
            OffloadKeys::new(&[1; 32]).key("anode-1", "id-a", 0),
            "stable"
        );
        assert_ne!(k, keys.key("anode-2", "id-a", 0));
        assert_ne!(k, keys.key("anode-1", "id-b", 0));
        assert_ne!(k, OffloadKeys::new(&[2; 32]).key("anode-1", "id-a", 0));
        let o = offload_of_task_5();
        let t = keys.ticket("id-a", &o, 1_000);
        let valid = Validity {
            issued_ms: 1_000,
            expires_ms: 1_000 + OFFLOAD_TICKET_LIFETIME_MS,
            key_epoch: 0,
        };
        assert_eq!(ticket::open_offload(&k, &o, &t), Some(valid));
        assert_eq!(
            ticket::open_offload(&keys.key("anode-1", "id-b", 0), &o, &t),
            None
        );
    }

    /// Offload keys rotate every period: a ticket is signed with its epoch's key and names it;
    /// an ANode is given the previous, current and next epochs' keys, so every ticket that has
    /// not expired verifies with one it holds — across an epoch's end too — and a key two
    /// epochs old is given no more and verifies no new ticket.
    #[test]
    fn offload_keys_rotate_and_the_previous_key_verifies_until_its_tickets_expired() {
        const { assert!(OFFLOAD_KEY_PERIOD_MS > OFFLOAD_TICKET_LIFETIME_MS) };
        let keys = OffloadKeys::new(&[1; 32]);
        let o = offload_of_task_5();
        let epoch_start = 20_000 * OFFLOAD_KEY_PERIOD_MS;
        // The last ticket of epoch 19,999, and a ticket of epoch 20,000 signed just after.
        let last = keys.ticket("id-a", &o, epoch_start - 1);
        let first = keys.ticket("id-a", &o, epoch_start);
        assert_eq!(ticket::offload_key_epoch(&last), Some(19_999));
        assert_eq!(ticket::offload_key_epoch(&first), Some(20_000));
        let k = |e| keys.key("anode-1", "id-a", e);
        assert_ne!(k(19_999), k(20_000), "a new key each epoch");
        assert!(ticket::open_offload(&k(20_000), &o, &first).is_some());
        assert!(ticket::open_offload(&k(19_999), &o, &first).is_none());
        assert!(ticket::open_offload(&k(19_999), &o, &last).is_some());
        // Until the last ticket of an epoch expired, its ANode holds that epoch's key.
        let held = |now_ms| keys.keys("anode-1", "id-a", now_ms);
        let until = epoch_start - 1 + OFFLOAD_TICKET_LIFETIME_MS;
        assert!(held(until).contains(&(19_999, k(19_999))));
        // Before an epoch begins, its key is already held (an ANode that beat just before).
        assert!(held(epoch_start - 1).contains(&(20_000, k(20_000))));
        // A key two epochs old is no longer given.
        let later = epoch_start + OFFLOAD_KEY_PERIOD_MS;
        assert_eq!(
            held(later).iter().map(|(e, _)| *e).collect::<Vec<_>>(),
            [20_000, 20_001, 20_002]
        );
    }

    /// Under a configured timing a ticket expires its lifetime after its signing — the ANode
    /// refuses it past that — and keys rotate at the configured period, the previous one held
    /// until the last ticket of its epoch expired; a key of one period's epoch is not the key
    /// of the same epoch number under another.
    #[test]
    fn a_ticket_lives_and_keys_rotate_as_configured() {
        let timing = OffloadTiming {
            ticket_lifetime_ms: 30_000,
            key_rotation_ms: 3_600_000,
        };
        let keys = OffloadKeys::new(&[1; 32]).with_timing(timing);
        let o = offload_of_task_5();
        let issued = 100 * 3_600_000 + 5_000;
        let t = keys.ticket("id-a", &o, issued);
        let valid = ticket::open_offload(&keys.key("anode-1", "id-a", 100), &o, &t)
            .expect("verifies with its epoch's key");
        assert_eq!(valid.expires_ms, issued + 30_000);
        assert!(!valid.expired(issued + 30_000) && valid.expired(issued + 30_001));
        assert_eq!(keys.epoch(issued), 100);
        let held = |now_ms| -> Vec<u64> {
            keys.keys("anode-1", "id-a", now_ms)
                .iter()
                .map(|(e, _)| *e)
                .collect()
        };
        assert_eq!(held(issued), [99, 100, 101]);
        // The last ticket of epoch 100 expires within epoch 101, whose keys hold 100's.
        assert!(held(101 * 3_600_000 - 1 + 30_000).contains(&100));
        let default = OffloadKeys::new(&[1; 32]);
        assert_ne!(
            keys.key("anode-1", "id-a", 100),
            default.key("anode-1", "id-a", 100),
            "another period, other keys"
        );
        assert_eq!(
            default.key("anode-1", "id-a", 100),
            OffloadKeys::new(&[1; 32])
                .with_timing(OffloadTiming {
                    ticket_lifetime_ms: 30_000,
                    ..OffloadTiming::default()
                })
                .key("anode-1", "id-a", 100),
            "the lifetime changes no key"
        );
        assert!(ticket::open_offload(&default.key("anode-1", "id-a", 100), &o, &t).is_none());
    }

    #[test]
    fn each_node_has_its_own_data_key_apart_from_its_offload_key() {
        let keys = OffloadKeys::new(&[1; 32]);
        let k = keys.data_key("a", "id-a");
        assert_eq!(k.len(), ticket::LEN);
        assert_eq!(
            k,
            OffloadKeys::new(&[1; 32]).data_key("a", "id-a"),
            "stable"
        );
        assert_ne!(k, keys.data_key("b", "id-a"));
        assert_ne!(k, keys.data_key("a", "id-b"));
        assert_ne!(k, keys.key("a", "id-a", 0), "not the node's offload key");
        let f = Fetch {
            path: "wf/1/P-0/out/x",
            producer: "a",
            consumer: "b",
            task_id: 9,
            attempt: 1,
            job_nonce: 77,
        };
        let t = keys.fetch_ticket("id-a", &f);
        assert!(ticket::verify(&k, &f, &t));
        assert!(!ticket::verify(&keys.data_key("b", "id-b"), &f, &t));
    }

    #[test]
    fn each_workflow_and_epoch_has_its_own_balancing_key_and_its_grants_verify_with_it() {
        let keys = OffloadKeys::new(&[1; 32]);
        let public = |k: &OffloadKeys, job, epoch| {
            k.balance_key(job, epoch).map(|k| k.public()).expect("key")
        };
        let p = public(&keys, 7, 100);
        assert_eq!(p, public(&OffloadKeys::new(&[1; 32]), 7, 100), "stable");
        assert_eq!(p, public(&keys, 7, 100), "the cached one");
        assert_ne!(p, public(&keys, 8, 100));
        assert_ne!(p, public(&keys, 7, 101));
        assert_ne!(p, public(&OffloadKeys::new(&[2; 32]), 7, 100));
        let g = Grant {
            job_id: 7,
            epoch: 100,
            serial: 1,
            launch: u32::MAX,
            cluster: 0,
            sent_at: 5,
            instances: &[0, 3],
            requires: &[0, 0],
            table: &[2, 1],
        };
        let t = keys.grant(&g);
        assert!(ticket::verify_grant(&p, &g, &t));
        assert!(!ticket::verify_grant(&public(&keys, 8, 100), &g, &t));
        // The key pair is not a node's data key over the same bytes.
        assert_ne!(p, keys.data_key("7", "100"));
    }
}
