//! Tickets: the server's authorisation of one call between agents, which the agent token
//! (every agent holds it) cannot give. Four kinds, one encoding, domain-separated by label:
//!
//! - **Offload tickets** (spec 01's accelerator sharing). The server gives each ANode a key of
//!   its own (its heartbeat reply's `offload_key`) and signs every offload it assigns to an
//!   NNode with that ANode's key: the ticket (`Assignment.offload_ticket`, passed on as
//!   `OffloadTask.ticket`) is HMAC-SHA256 over [`TICKET_LABEL`], the task, the attempt, the
//!   account it runs as, the NNode's name, the ANode's name and the digest of what it runs
//!   ([`Offload`], [`offload_digest`]: the command and its arguments, the environment, the
//!   account, the declared input and output files, the index, entry and device count). An
//!   ANode runs an offload only when its key verifies the ticket for exactly what the call asks
//!   and the task it ships, so a ticket seen elsewhere runs nothing but that attempt's command,
//!   as that account, from that NNode, on that ANode: an NNode that changes the command, the
//!   environment or the files of the spec it ships is refused like one without a ticket.
//!   The ticket also carries when the server issued it, when it expires, and the epoch of the
//!   ANode key that signed it ([`Validity`], signed in and appended to the MAC:
//!   [`seal_offload`], [`open_offload`]; the server rotates the keys by epoch); an ANode starts
//!   no run of an expired ticket, and runs each attempt at most once (its agent's
//!   `accel::attempts`).
//!   Not covered: the working directory (an ANode runs every offload in a staging directory
//!   of its own, whatever the shipped spec says), where stdout and stderr go (the ANode
//!   captures them and ships them back), and the limits (the time limit changes while the task
//!   runs — `hetsched update --time-limit`, passed on by the NNode — and the others bound the
//!   covered command, they do not choose it).
//! - **Fetch tickets** (workflow data, issue 13). The server gives every node a data key of its
//!   own (`HeartbeatReply.data_key`) and signs each input it names in an assignment
//!   (`WorkflowInput.ticket`) with the producer's data key: HMAC-SHA256 over [`FETCH_LABEL`],
//!   the output's path, the producer's and the consumer's node names, the consumer's task and
//!   attempt, and the job's nonce when it has one ([`Fetch`]). The producer's agent serves an
//!   output (`AgentData.Fetch`) only when its key verifies the ticket the request carries for
//!   exactly that path, itself, and the consumer, task, attempt and nonce the request names: a
//!   ticket seen elsewhere reads that one file and nothing else — and only from a workflow
//!   directory its agent marked with that nonce (the job incarnation that wrote it).
//!
//! - **Log tickets** (`hetsched log`, `hetsched topology log`). The server relays a user's read
//!   of task output to the agent that holds it (`AgentLogs.ReadLog`), and signs each relayed
//!   request with that agent's data key (`AgentLogRequest.ticket`): HMAC-SHA256 over
//!   [`LOG_LABEL`], the file the request names ([`LogFile`]: a task's attempt or a divisible
//!   chunk, each with its job's nonce, or a stream worker), the stream, and the agent's node
//!   name ([`Log`]). The agent serves a page only when its key verifies the ticket for exactly
//!   what the request names and itself: the agent token alone (every agent holds it) reads no
//!   one's output. Job ids repeat (a restored backup, a fresh data directory) while agents keep
//!   old jobs' files, so the job's nonce — drawn when the server accepted the job — names the
//!   job incarnation too: the agent serves a task's or chunk's file only from a job directory
//!   it marked with that nonce.
//!
//! - **Grants** (PCDDB allocation requests, spec 05 §4). The server, every workflow's launch
//!   node, signs each allocation request it sends out (`BalanceMessage.grant`): an Ed25519
//!   signature over [`GRANT_LABEL`], the workflow, the launch node's epoch, a serial, the
//!   request's launch node, cluster and send time, the instances it grants with their
//!   requirements, and the underloaded table it was sent with ([`Grant`]). The request hops
//!   from agent to agent (`AgentData.Deliver`) with its grant and the lists originally
//!   granted; an agent takes a request from another agent only when the workflow's public
//!   balancing key (`PcddbJob.balance_key`) verifies the grant, every instance offered, with
//!   its requirements, is in it, and the request's table is the granted one less the nodes
//!   it visited ([`Grant::carries`]: no node on the path reorders or drops entries). A grant is a signature, not
//!   a MAC: every balancing agent must verify it, and with a shared MAC key every one of them
//!   could grant too; with Ed25519 only the server, which holds the private half
//!   ([`GrantKey`]), can.
//!
//! The keys are different (the server derives them with different labels; fetch and log
//! tickets share a node's data key), and so are the labels the messages start with: no ticket
//! of one kind passes for a ticket of another.
//!
//! This module is the one encoding both sides use: [`sign`] on the server, [`verify`] (constant
//! time) on the agent that serves; for grants [`GrantKey::sign`] and [`verify_grant`].

use ring::hmac;

/// Length of a key (an ANode's offload key, a node's data key) and of a ticket (HMAC-SHA256).
pub const LEN: usize = 32;

/// Domain separation: what a ticket's MAC covers starts with this, so no other MAC made with an
/// offload key can pass for a ticket. v2 added the digest of what runs ([`Offload::runs`]), v3
/// the ticket's [`Validity`]: a ticket of one version never verifies as one of another.
pub const TICKET_LABEL: &[u8] = b"hetsched offload ticket v3";

/// Length of an offload ticket as it travels: the MAC ([`LEN`]), then its [`Validity`] (when
/// it was issued and when it expires, milliseconds since the Unix epoch, and the epoch of the
/// key that signed it: 8 bytes each, big endian), which the MAC covers.
pub const OFFLOAD_TICKET_LEN: usize = LEN + 24;

/// When an offload ticket was issued and until when it may start a run, in milliseconds since
/// the Unix epoch by the server's clock (the ANode compares with its own: keep the clocks in
/// step, as for any expiry), and which of the ANode's keys signed it: the server rotates them,
/// and an ANode holds a few at once (`HeartbeatReply.offload_keys`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// When the server signed it.
    pub issued_ms: u64,
    /// The last millisecond an ANode starts a run with it.
    pub expires_ms: u64,
    /// The epoch of the ANode's offload key it was signed with.
    pub key_epoch: u64,
}

impl Validity {
    /// Whether the ticket has expired at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        now_ms > self.expires_ms
    }
}

/// Domain separation for the digest of what an offload runs ([`offload_digest`]).
pub const RUNS_LABEL: &[u8] = b"hetsched offload runs v1";

/// Length of [`offload_digest`] (SHA-256).
pub const DIGEST_LEN: usize = 32;

/// Metadata an ANode puts on the `PermissionDenied` that refuses an offload for its ticket
/// (none, or one that does not match) or for its inputs (a file the task does not declare, one
/// over the ANode's `max_input_bytes`, or no room above its `min_free_disk`): the NNode then
/// reports the attempt interrupted, not failed — the task is not at fault, and the server runs
/// it again with a fresh ticket.
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
    /// What it runs ([`offload_digest`] of the spec the NNode ships, with the task's index,
    /// entry and device count): the server's from the spec it sent, the ANode's from the spec
    /// the call brings.
    pub runs: [u8; DIGEST_LEN],
}

/// The digest of what an offloaded task runs: SHA-256 over [`RUNS_LABEL`] and the fields of
/// `spec` that decide what runs and as whom — job, application and variant (the task's
/// `HETSCHED_*` environment), the command and its arguments, the environment (sorted by key:
/// protobuf's map order is not fixed), the account (`run_as`), the declared input and output
/// files — and the task's `index` and `entry` (which fill `{index}` and `{entry}` in the
/// arguments) and `gpus` (the devices it takes, at least 1). Each field has a fixed width or a
/// length prefix, each list its length, so no two different tasks encode alike.
///
/// The one function both sides call: the server over the spec it sends the NNode (a workflow
/// instance's as the NNode ships it: `hetsched_core::input::workflow_runtime::offloaded_instance`),
/// the ANode over the spec the call brings. A field added here must be one the NNode ships as
/// the server sent it, or every offload is refused.
pub fn offload_digest(
    spec: &crate::TaskSpec,
    index: u32,
    entry: Option<&str>,
    gpus: u32,
) -> [u8; DIGEST_LEN] {
    let list = |m: Message, items: &[String]| {
        items
            .iter()
            .fold(m.u64(items.len() as u64), |m, s| m.str(s))
    };
    let mut env: Vec<(&String, &String)> = spec.env.iter().collect();
    env.sort_unstable();
    let mut m = Message::new(RUNS_LABEL, 256)
        .u64(spec.job_id)
        .str(&spec.app)
        .str(&spec.variant);
    m = list(m, &spec.argv).u64(env.len() as u64);
    for (k, v) in env {
        m = m.str(k).str(v);
    }
    m = m.str(&spec.run_as);
    m = list(m, &spec.inputs);
    m = list(m, &spec.outputs).u32(index);
    m = match entry {
        None => m.u32(0),
        Some(e) => m.u32(1).str(e),
    };
    let m = m.u32(gpus.max(1));
    let d = ring::digest::digest(&ring::digest::SHA256, &m.0);
    let mut out = [0u8; DIGEST_LEN];
    // SHA-256 is always DIGEST_LEN bytes.
    out.copy_from_slice(d.as_ref());
    out
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
    /// The workflow's job nonce (`Assignment.job_nonce`; 0: none, a job from before nonces):
    /// the producer serves the output only from a workflow directory marked with it.
    pub job_nonce: u64,
}

/// Domain separation for log tickets: what a log ticket's MAC covers starts with this (a log
/// ticket and a fetch ticket are made with the same data key).
pub const LOG_LABEL: &[u8] = b"hetsched log ticket v1";

/// The file a log read names, as the agent's log listener picks it from an
/// [`AgentLogRequest`](crate::AgentLogRequest) ([`Log::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFile<'a> {
    /// A task attempt's capture file (or the file its application named instead).
    Task {
        /// The job.
        job_id: u64,
        /// The task's application.
        app: &'a str,
        /// Its index.
        index: u32,
        /// Which process of a multi-process workflow instance (0: none).
        process: u32,
        /// The attempt.
        attempt: u32,
        /// The job's nonce (0: a job from before nonces): the job incarnation whose file it is.
        job_nonce: u64,
    },
    /// A divisible job's chunk.
    Chunk {
        /// The divisible job.
        job_id: u64,
        /// The chunk's number.
        chunk: u64,
        /// The job's nonce, as a task's.
        job_nonce: u64,
    },
    /// A stream worker's stderr.
    Worker {
        /// The topology.
        topology: &'a str,
        /// The placement's generation.
        generation: u64,
        /// The worker's index in it.
        worker: u32,
        /// The account it runs as (empty: the agent's own).
        run_as: &'a str,
    },
}

/// The read of task output a log ticket authorises: any page of one file on one node's agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log<'a> {
    /// The file.
    pub file: LogFile<'a>,
    /// Its stderr (else its stdout).
    pub stderr: bool,
    /// The node whose agent serves it.
    pub node: &'a str,
}

impl<'a> Log<'a> {
    /// What `req` asks node `node`'s agent to read. The one reading of a request: the agent's
    /// listener serves the file this names (a stream worker when `topology` is set, else a
    /// chunk when `divisible` is, else a task), so the fields a ticket covers are the fields
    /// that choose the file; the others (offset, limit) only page it.
    pub fn of(req: &'a crate::AgentLogRequest, node: &'a str) -> Self {
        let file = if !req.topology.is_empty() {
            LogFile::Worker {
                topology: &req.topology,
                generation: req.generation,
                worker: req.worker,
                run_as: &req.run_as,
            }
        } else if req.divisible {
            LogFile::Chunk {
                job_id: req.job_id,
                chunk: req.chunk,
                job_nonce: req.job_nonce,
            }
        } else {
            LogFile::Task {
                job_id: req.job_id,
                app: &req.app,
                index: req.index,
                process: req.process,
                attempt: req.attempt,
                job_nonce: req.job_nonce,
            }
        };
        Self {
            file,
            stderr: req.stderr,
            node,
        }
    }
}

/// Domain separation for grants: what a grant's signature covers starts with this.
/// (v2: the underloaded table is signed too; a v1 grant verifies as no v2 one.)
pub const GRANT_LABEL: &[u8] = b"hetsched pcddb grant v2";

/// Length of a grant (an Ed25519 signature) and of a balancing key's public half.
pub const GRANT_LEN: usize = 64;

/// An allocation request a launch node granted: the fields that never change while the request
/// hops, and the instances it was sent with (the agents take them from its front; a hop offers
/// a subset). `instances` is in ascending order and `requires[k]` is `instances[k]`'s required
/// attribute mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant<'a> {
    /// The workflow.
    pub job_id: u64,
    /// When its launch node was built (the server's start, or its last rollback).
    pub epoch: u64,
    /// The grant's number among the workflow's.
    pub serial: u64,
    /// The request's launch node.
    pub launch: u32,
    /// The request's proximity cluster.
    pub cluster: u32,
    /// When the launch node sent it.
    pub sent_at: u64,
    /// The instances granted, ascending.
    pub instances: &'a [u32],
    /// Their requirements, in the same order.
    pub requires: &'a [u64],
    /// The underloaded table it was sent with, in order (node ids): each hop drops only
    /// itself, the table's first entry, so the table a request reaches a node with is a
    /// suffix of this one that begins with that node ([`Grant::carries`]).
    pub table: &'a [u32],
}

impl Grant<'_> {
    /// Whether `table` is one this grant's request carries on an honest path: the granted
    /// table less the nodes it visited before, i.e. a suffix of it (empty once the last node
    /// took its share). A table reordered, stripped of a node ahead, or given a node is not.
    pub fn carries(&self, table: &[u32]) -> bool {
        self.table.ends_with(table)
    }

    /// Whether it granted `instance` with exactly `requires` (a request that strips an
    /// instance's requirements is not the one granted).
    pub fn covers(&self, instance: u32, requires: u64) -> bool {
        self.instances
            .binary_search(&instance)
            .ok()
            .and_then(|k| self.requires.get(k))
            .is_some_and(|&r| r == requires)
    }

    /// Whether its lists are well formed: as many requirements as instances, instances
    /// strictly ascending (so [`Grant::covers`] finds each once).
    pub fn well_formed(&self) -> bool {
        self.instances.len() == self.requires.len()
            && self.instances.windows(2).all(|w| w[0] < w[1])
    }
}

/// A workflow's balancing key, the private half: only the server holds it. Derived from a
/// 32-byte seed (the server's, from its secret, the workflow and the epoch), so a restarted
/// server with the same secret and epoch would derive it again; its public half
/// ([`GrantKey::public`]) goes to the agents.
pub struct GrantKey(ring::signature::Ed25519KeyPair);

impl std::fmt::Debug for GrantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrantKey(…)")
    }
}

impl GrantKey {
    /// The key pair of `seed`.
    pub fn from_seed(seed: &[u8; 32]) -> Option<Self> {
        // Only a seed of another length is rejected; one of 32 bytes never is.
        ring::signature::Ed25519KeyPair::from_seed_unchecked(seed)
            .ok()
            .map(Self)
    }

    /// The public half, which verifies its grants ([`verify_grant`]).
    pub fn public(&self) -> Vec<u8> {
        ring::signature::KeyPair::public_key(&self.0)
            .as_ref()
            .to_vec()
    }

    /// The grant of `what` (a signature of [`GRANT_LEN`] bytes).
    pub fn sign(&self, what: &Grant) -> Vec<u8> {
        self.0.sign(&what.message()).as_ref().to_vec()
    }
}

/// Whether `grant` is the grant of `what` under the balancing key whose public half is
/// `public`. (A signature check: nothing secret is compared, so timing tells nothing.)
pub fn verify_grant(public: &[u8], what: &Grant, grant: &[u8]) -> bool {
    what.well_formed()
        && ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
            .verify(&what.message(), grant)
            .is_ok()
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

/// An offload with its ticket's validity: what an offload ticket's MAC covers. (An [`Offload`]
/// alone is no [`Ticketed`]: every offload ticket carries its validity.)
struct Sealed<'a>(&'a Offload<'a>, Validity);

impl Ticketed for Sealed<'_> {
    fn message(&self) -> Vec<u8> {
        let o = self.0;
        let mut m = Message::new(
            TICKET_LABEL,
            12 + 24 + o.run_as.len() + o.nnode.len() + o.anode.len() + DIGEST_LEN + 24,
        )
        .u64(o.task_id)
        .u32(o.attempt)
        .str(o.run_as)
        .str(o.nnode)
        .str(o.anode);
        m.0.extend_from_slice(&o.runs);
        m.u64(self.1.issued_ms)
            .u64(self.1.expires_ms)
            .u64(self.1.key_epoch)
            .0
    }
}

/// The ticket for `what` under `key` (the ANode's offload key), valid as `valid` says: the MAC
/// over both, then `valid` itself, which the ANode reads back ([`open_offload`]).
pub fn seal_offload(key: &[u8], what: &Offload, valid: Validity) -> Vec<u8> {
    let mut t = sign(key, &Sealed(what, valid));
    t.extend_from_slice(&valid.issued_ms.to_be_bytes());
    t.extend_from_slice(&valid.expires_ms.to_be_bytes());
    t.extend_from_slice(&valid.key_epoch.to_be_bytes());
    t
}

/// The epoch of the ANode key `ticket` says it was signed with, to pick the key that verifies
/// it ([`open_offload`]); `None` for what is no offload ticket of this version.
pub fn offload_key_epoch(ticket: &[u8]) -> Option<u64> {
    if ticket.len() != OFFLOAD_TICKET_LEN {
        return None;
    }
    Some(u64::from_be_bytes(ticket[LEN + 16..].try_into().ok()?))
}

/// The validity of `ticket` when it is `key`'s ticket for `what` (the MAC compared in constant
/// time); `None` when it is not — forged, for another offload, of another length (a ticket of
/// an earlier version), or its validity changed. Whether it has expired is the caller's check.
pub fn open_offload(key: &[u8], what: &Offload, ticket: &[u8]) -> Option<Validity> {
    if ticket.len() != OFFLOAD_TICKET_LEN {
        return None;
    }
    let (mac, trailer) = ticket.split_at(LEN);
    let field = |k: usize| {
        trailer[8 * k..8 * (k + 1)]
            .try_into()
            .ok()
            .map(u64::from_be_bytes)
    };
    let valid = Validity {
        issued_ms: field(0)?,
        expires_ms: field(1)?,
        key_epoch: field(2)?,
    };
    verify(key, &Sealed(what, valid), mac).then_some(valid)
}

impl Ticketed for Fetch<'_> {
    fn message(&self) -> Vec<u8> {
        let m = Message::new(
            FETCH_LABEL,
            24 + self.path.len() + self.producer.len() + self.consumer.len() + 20,
        )
        .str(self.path)
        .str(self.producer)
        .str(self.consumer)
        .u64(self.task_id)
        .u32(self.attempt);
        // A job from before nonces (0) keeps the encoding it had, so agents that predate nonces
        // still verify its fetches; with a nonce the message is 8 bytes longer (the fields
        // before have a fixed width or a length prefix: no other fetch encodes alike).
        match self.job_nonce {
            0 => m.0,
            n => m.u64(n).0,
        }
    }
}

impl Ticketed for Log<'_> {
    fn message(&self) -> Vec<u8> {
        // A tag says which kind of file the fields that follow name: no task's fields encode
        // as a chunk's or a worker's. A task or chunk of a job with a nonce has a tag of its own
        // (4, 5) and the nonce after its fields; one of a job from before nonces (0) keeps the
        // tag and encoding it had (1, 2), which agents that predate nonces verify.
        let m = match self.file {
            LogFile::Task {
                job_id,
                app,
                index,
                process,
                attempt,
                job_nonce,
            } => {
                let m = Message::new(
                    LOG_LABEL,
                    4 + 8 + 8 + app.len() + 12 + 8 + 4 + 8 + self.node.len(),
                )
                .u32(if job_nonce == 0 { 1 } else { 4 })
                .u64(job_id)
                .str(app)
                .u32(index)
                .u32(process)
                .u32(attempt);
                if job_nonce == 0 { m } else { m.u64(job_nonce) }
            }
            LogFile::Chunk {
                job_id,
                chunk,
                job_nonce,
            } => {
                let m = Message::new(LOG_LABEL, 4 + 16 + 8 + 4 + 8 + self.node.len())
                    .u32(if job_nonce == 0 { 2 } else { 5 })
                    .u64(job_id)
                    .u64(chunk);
                if job_nonce == 0 { m } else { m.u64(job_nonce) }
            }
            LogFile::Worker {
                topology,
                generation,
                worker,
                run_as,
            } => Message::new(
                LOG_LABEL,
                4 + 8 + topology.len() + 12 + 8 + run_as.len() + 4 + 8 + self.node.len(),
            )
            .u32(3)
            .str(topology)
            .u64(generation)
            .u32(worker)
            .str(run_as),
        };
        m.u32(u32::from(self.stderr)).str(self.node).0
    }
}

impl Ticketed for Grant<'_> {
    fn message(&self) -> Vec<u8> {
        let mut m = Message::new(
            GRANT_LABEL,
            64 + 12 * self.instances.len() + 4 * self.table.len(),
        )
        .u64(self.job_id)
        .u64(self.epoch)
        .u64(self.serial)
        .u32(self.launch)
        .u32(self.cluster)
        .u64(self.sent_at)
        .u64(self.instances.len() as u64);
        for &i in self.instances {
            m = m.u32(i);
        }
        m = m.u64(self.requires.len() as u64);
        for &r in self.requires {
            m = m.u64(r);
        }
        m = m.u64(self.table.len() as u64);
        for &n in self.table {
            m = m.u32(n);
        }
        m.0
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

    /// A validity: an hour from an instant in 2026.
    const VALID: Validity = Validity {
        issued_ms: 1_780_000_000_000,
        expires_ms: 1_780_003_600_000,
        key_epoch: 20_601,
    };

    fn offload() -> Offload<'static> {
        Offload {
            task_id: 42,
            attempt: 2,
            run_as: "alice",
            nnode: "nnode-1",
            anode: "anode-1",
            runs: offload_digest(&task_spec(), 4, None, 1),
        }
    }

    fn task_spec() -> crate::TaskSpec {
        crate::TaskSpec {
            key: 3,
            job_id: 7,
            app: "solve".into(),
            variant: "gpu".into(),
            argv: vec!["sh".into(), "-c".into(), "solve {index}".into()],
            env: [("A".to_string(), "1".to_string()), ("B".into(), "2".into())].into(),
            workdir: "/data/job".into(),
            inputs: vec!["in/{index}.dat".into()],
            outputs: vec!["out/{index}.dat".into()],
            run_as: "alice".into(),
            time_limit_ms: 60_000,
            ..Default::default()
        }
    }

    /// A ticket names what its offload runs: the ticket of one spec verifies for no spec that
    /// runs another command, with another environment, as another account, with other files,
    /// for another index, entry or device count. The fields that do not choose what runs on the
    /// ANode (its working directory, the limits, where its output goes) change nothing.
    #[test]
    fn a_ticket_verifies_only_for_the_spec_it_was_made_for() {
        let t = seal_offload(&KEY, &offload(), VALID);
        let verify = |key: &[u8], o: &Offload, t: &[u8]| open_offload(key, o, t).is_some();
        let with = |spec: &crate::TaskSpec, index, entry, gpus| Offload {
            runs: offload_digest(spec, index, entry, gpus),
            ..offload()
        };
        assert!(verify(&KEY, &with(&task_spec(), 4, None, 1), &t));
        type Change = (&'static str, fn(&mut crate::TaskSpec));
        let changes: [Change; 14] = [
            ("command", |s| s.argv[2] = "rm -rf ~".into()),
            ("another argument", |s| s.argv.push("--force".into())),
            ("arguments split otherwise", |s| {
                s.argv = vec!["sh".into(), "-c solve".into(), " {index}".into()];
            }),
            ("env value", |s| {
                s.env.insert("A".into(), "2".into());
            }),
            ("env added", |s| {
                s.env.insert("LD_PRELOAD".into(), "/tmp/x.so".into());
            }),
            ("env key and value split otherwise", |s| {
                s.env.remove("A");
                s.env.insert("A1".into(), String::new());
            }),
            ("account", |s| s.run_as = "root".into()),
            ("no account", |s| s.run_as.clear()),
            ("input", |s| s.inputs.push("../../etc/shadow".into())),
            ("output", |s| s.outputs = vec!["out/x".into()]),
            ("input as output", |s| {
                s.outputs.append(&mut s.inputs);
            }),
            ("app", |s| s.app = "other".into()),
            ("variant", |s| s.variant = "cpu".into()),
            ("job", |s| s.job_id = 8),
        ];
        for (what, change) in changes {
            let mut s = task_spec();
            change(&mut s);
            assert!(!verify(&KEY, &with(&s, 4, None, 1), &t), "{what}");
        }
        assert!(!verify(&KEY, &with(&task_spec(), 5, None, 1), &t), "index");
        assert!(
            !verify(&KEY, &with(&task_spec(), 4, Some(""), 1), &t),
            "entry"
        );
        assert!(!verify(&KEY, &with(&task_spec(), 4, None, 2), &t), "gpus");
        // Not what runs: the ANode runs it in its own directory, captures its output, and is
        // told its time limit as it changes.
        let unchanged: [fn(&mut crate::TaskSpec); 5] = [
            |s| s.workdir = "/elsewhere".into(),
            |s| s.time_limit_ms = 1,
            |s| s.stdout = "x.out".into(),
            |s| s.key = 5,
            |s| s.env = [("B".to_string(), "2".to_string()), ("A".into(), "1".into())].into(),
        ];
        for (i, change) in unchanged.iter().enumerate() {
            let mut s = task_spec();
            change(&mut s);
            assert!(verify(&KEY, &with(&s, 4, None, 1), &t), "unchanged {i}");
        }
        // No device is one device: the NNode and the server both ship at least 1.
        assert_eq!(
            offload_digest(&task_spec(), 4, None, 0),
            offload_digest(&task_spec(), 4, None, 1)
        );
    }

    #[test]
    fn a_ticket_verifies_for_its_offload_only() {
        let t = seal_offload(&KEY, &offload(), VALID);
        assert_eq!(t.len(), OFFLOAD_TICKET_LEN);
        assert_eq!(open_offload(&KEY, &offload(), &t), Some(VALID));
        let verify = |key: &[u8], o: &Offload, t: &[u8]| open_offload(key, o, t).is_some();
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
        assert!(!verify(&KEY, &offload(), &t[..LEN]), "the MAC alone");
        assert!(!verify(&KEY, &offload(), &[]), "none");
    }

    /// A ticket's validity is signed in: moving its expiry (or its issue, or its key's epoch)
    /// makes it verify for nothing, so only the server decides how long a ticket starts runs.
    #[test]
    fn a_tickets_validity_cannot_be_extended() {
        let t = seal_offload(&KEY, &offload(), VALID);
        for (at, what) in [
            (LEN, "issued"),
            (LEN + 8, "expiry"),
            (LEN + 16, "key epoch"),
        ] {
            for byte in [at, at + 7] {
                let mut moved = t.clone();
                moved[byte] ^= 1;
                assert_eq!(
                    open_offload(&KEY, &offload(), &moved),
                    None,
                    "{what} {byte}"
                );
            }
        }
        let later = Validity {
            expires_ms: u64::MAX,
            ..VALID
        };
        let mut spliced = t[..LEN].to_vec();
        spliced.extend_from_slice(&later.issued_ms.to_be_bytes());
        spliced.extend_from_slice(&later.expires_ms.to_be_bytes());
        spliced.extend_from_slice(&later.key_epoch.to_be_bytes());
        assert_eq!(open_offload(&KEY, &offload(), &spliced), None);
        assert_eq!(offload_key_epoch(&t), Some(VALID.key_epoch));
        assert_eq!(
            offload_key_epoch(&t[..LEN + 16]),
            None,
            "a ticket of another length"
        );
        assert!(!VALID.expired(VALID.expires_ms) && VALID.expired(VALID.expires_ms + 1));
    }

    /// The offload encoding (v3): v1's fields, then the digest of what runs, then the validity,
    /// under the v3 label. A v2 ticket (the same fields without the validity, under the v2
    /// label: a bare MAC) is not a v3 one, with or without a validity appended.
    #[test]
    fn the_offload_encoding_is_v1s_with_the_digest_and_the_validity_under_a_new_label() {
        let v1 = |label: &[u8]| {
            let mut m = label.to_vec();
            m.extend_from_slice(&42u64.to_be_bytes());
            m.extend_from_slice(&2u32.to_be_bytes());
            for s in ["alice", "nnode-1", "anode-1"] {
                m.extend_from_slice(&(s.len() as u64).to_be_bytes());
                m.extend_from_slice(s.as_bytes());
            }
            m
        };
        let mut m = v1(b"hetsched offload ticket v3");
        m.extend_from_slice(&offload().runs);
        m.extend_from_slice(&VALID.issued_ms.to_be_bytes());
        m.extend_from_slice(&VALID.expires_ms.to_be_bytes());
        m.extend_from_slice(&VALID.key_epoch.to_be_bytes());
        assert_eq!(Sealed(&offload(), VALID).message(), m);
        let mut v2 = v1(b"hetsched offload ticket v2");
        v2.extend_from_slice(&offload().runs);
        let old = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &KEY), &v2);
        assert_eq!(
            open_offload(&KEY, &offload(), old.as_ref()),
            None,
            "a v2 ticket"
        );
        let mut dressed = old.as_ref().to_vec();
        dressed.extend_from_slice(&seal_offload(&KEY, &offload(), VALID)[LEN..]);
        assert_eq!(
            open_offload(&KEY, &offload(), &dressed),
            None,
            "with a validity"
        );
    }

    fn fetch() -> Fetch<'static> {
        Fetch {
            path: "wf/7/P-0/out/x",
            producer: "a",
            consumer: "b",
            task_id: 42,
            attempt: 2,
            job_nonce: 0x5eed,
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
            // Another incarnation of the job (its id repeats after a restored backup), or one
            // from before nonces.
            Fetch {
                job_nonce: 0x5eee,
                ..fetch()
            },
            Fetch {
                job_nonce: 0,
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

    /// The labels keep the kinds apart: no message of one kind is a message of another.
    #[test]
    fn no_offload_ticket_passes_for_a_fetch_ticket() {
        let o = Sealed(&offload(), VALID).message();
        let f = fetch().message();
        let l = Log::of(&task_read(), "a").message();
        assert!(o.starts_with(TICKET_LABEL) && f.starts_with(FETCH_LABEL));
        assert!(l.starts_with(LOG_LABEL));
        let g = grant_fixture();
        assert!(g.0.message().starts_with(GRANT_LABEL));
        let labels = [TICKET_LABEL, FETCH_LABEL, LOG_LABEL, GRANT_LABEL];
        for (i, a) in labels.iter().enumerate() {
            for (j, b) in labels.iter().enumerate() {
                assert!(i == j || !a.starts_with(b), "{i} {j}");
            }
        }
    }

    const INSTANCES: [u32; 3] = [2, 5, 9];
    const REQUIRES: [u64; 3] = [0, 4, 0];
    const TABLE: [u32; 3] = [4, 1, 6];

    fn grant_fixture() -> (Grant<'static>, GrantKey) {
        let g = Grant {
            job_id: 7,
            epoch: 11,
            serial: 3,
            launch: u32::MAX,
            cluster: 0,
            sent_at: 123,
            instances: &INSTANCES,
            requires: &REQUIRES,
            table: &TABLE,
        };
        (g, GrantKey::from_seed(&[5; 32]).expect("a 32-byte seed"))
    }

    #[test]
    fn a_grant_verifies_for_its_request_only_and_covers_its_instances_with_their_requirements() {
        let (g, key) = grant_fixture();
        let public = key.public();
        assert_eq!(public.len(), 32);
        let t = key.sign(&g);
        assert_eq!(t.len(), GRANT_LEN);
        assert!(verify_grant(&public, &g, &t));
        let fewer = [2, 5];
        let more = [2, 5, 9, 10];
        let others = [
            Grant { job_id: 8, ..g },
            Grant { epoch: 12, ..g },
            Grant { serial: 4, ..g },
            Grant { launch: 1, ..g },
            Grant { cluster: 1, ..g },
            Grant { sent_at: 124, ..g },
            Grant {
                instances: &more,
                requires: &[0, 4, 0, 0],
                ..g
            },
            Grant {
                instances: &fewer,
                requires: &[0, 4],
                ..g
            },
            Grant {
                requires: &[0, 0, 0],
                ..g
            },
            Grant {
                table: &[1, 4, 6],
                ..g
            },
            Grant {
                table: &[4, 6],
                ..g
            },
            Grant {
                table: &[4, 1, 6, 2],
                ..g
            },
        ];
        for o in others {
            assert!(!verify_grant(&public, &o, &t), "{o:?}");
        }
        let other_key = GrantKey::from_seed(&[6; 32]).expect("seed");
        assert!(!verify_grant(&other_key.public(), &g, &t), "another key");
        assert!(!verify_grant(&public, &g, &t[..GRANT_LEN - 1]), "truncated");
        assert!(!verify_grant(&public, &g, &[]), "none");
        assert!(!verify_grant(&[], &g, &t), "no key");
        // The instances granted, each with its own requirements only.
        assert!(g.covers(5, 4) && g.covers(2, 0) && g.covers(9, 0));
        assert!(!g.covers(5, 0), "requirements stripped");
        assert!(!g.covers(3, 0), "not granted");
        // The tables an honest path carries: the granted one less the nodes visited.
        for carried in [&[4, 1, 6][..], &[1, 6], &[6], &[]] {
            assert!(g.carries(carried), "{carried:?}");
        }
        for altered in [&[1, 4, 6][..], &[4, 6], &[6, 1], &[1], &[1, 6, 2], &[3]] {
            assert!(!g.carries(altered), "{altered:?}");
        }
        // Unsorted or ragged lists are not a grant, whatever signs them.
        let unsorted = Grant {
            instances: &[5, 2, 9],
            ..g
        };
        assert!(!verify_grant(&public, &unsorted, &key.sign(&unsorted)));
        let ragged = Grant {
            requires: &[0, 4],
            ..g
        };
        assert!(!verify_grant(&public, &ragged, &key.sign(&ragged)));
    }

    fn task_read() -> crate::AgentLogRequest {
        crate::AgentLogRequest {
            job_id: 7,
            app: "sim".into(),
            index: 3,
            attempt: 2,
            stderr: true,
            job_nonce: 0x5eed,
            ..Default::default()
        }
    }

    /// A job from before nonces (0) signs and verifies as before them, so agents that predate
    /// nonces still serve its output and fetches; with a nonce, neither a task's nor a chunk's
    /// nor a fetch's ticket passes for the same file without it (or with another).
    #[test]
    fn a_nonce_of_0_keeps_the_encoding_from_before_nonces() {
        let mut legacy = task_read();
        legacy.job_nonce = 0;
        let mut v1 = LOG_LABEL.to_vec();
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.extend_from_slice(&7u64.to_be_bytes());
        v1.extend_from_slice(&3u64.to_be_bytes());
        v1.extend_from_slice(b"sim");
        for v in [3u32, 0, 2, 1] {
            v1.extend_from_slice(&v.to_be_bytes());
        }
        v1.extend_from_slice(&1u64.to_be_bytes());
        v1.extend_from_slice(b"a");
        assert_eq!(Log::of(&legacy, "a").message(), v1);
        let with = Log::of(&task_read(), "a").message();
        assert_eq!(
            &with[LOG_LABEL.len()..LOG_LABEL.len() + 4],
            &4u32.to_be_bytes()
        );
        let chunk = |job_nonce| crate::AgentLogRequest {
            job_id: 7,
            divisible: true,
            chunk: 3,
            job_nonce,
            ..Default::default()
        };
        let c = sign(&KEY, &Log::of(&chunk(9), "a"));
        assert!(verify(&KEY, &Log::of(&chunk(9), "a"), &c));
        assert!(!verify(&KEY, &Log::of(&chunk(0), "a"), &c));
        assert!(!verify(&KEY, &Log::of(&chunk(8), "a"), &c));
        let old = Fetch {
            job_nonce: 0,
            ..fetch()
        };
        let mut v1 = FETCH_LABEL.to_vec();
        for s in [old.path, old.producer, old.consumer] {
            v1.extend_from_slice(&(s.len() as u64).to_be_bytes());
            v1.extend_from_slice(s.as_bytes());
        }
        v1.extend_from_slice(&42u64.to_be_bytes());
        v1.extend_from_slice(&2u32.to_be_bytes());
        assert_eq!(old.message(), v1);
        assert_eq!(fetch().message().len(), v1.len() + 8);
    }

    #[test]
    fn a_log_ticket_verifies_for_its_file_and_node_only_and_any_page_of_it() {
        let req = task_read();
        let t = sign(&KEY, &Log::of(&req, "a"));
        assert_eq!(t.len(), LEN);
        let mut paged = req.clone();
        (paged.offset, paged.limit) = (-100, 10);
        assert!(verify(&KEY, &Log::of(&paged, "a"), &t), "another page");
        assert!(!verify(&KEY, &Log::of(&req, "b"), &t), "another node");
        assert!(!verify(&[8; LEN], &Log::of(&req, "a"), &t), "another key");
        let changes: [fn(&mut crate::AgentLogRequest); 14] = [
            |r| r.job_id = 8,
            // Another incarnation of job 7 (its id repeats after a restored backup), or the
            // job of the same id from before nonces.
            |r| r.job_nonce = 0x5eee,
            |r| r.job_nonce = 0,
            |r| r.app = "simx".into(),
            |r| r.index = 4,
            |r| r.process = 1,
            |r| r.attempt = 1,
            |r| r.stderr = false,
            // The same job as a divisible one's chunk, or a worker's stderr.
            |r| r.divisible = true,
            |r| r.topology = "sim".into(),
            // Fields the task's file is not chosen by do not choose another file, but a
            // request that sets them is read as another kind (above) and verified as such.
            |r| {
                r.divisible = true;
                r.chunk = 3;
            },
            |r| {
                r.topology = "t".into();
                r.worker = 3;
            },
            |r| {
                r.topology = "t".into();
                r.run_as = "alice".into();
            },
            |r| r.app = "si".into(),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut other = req.clone();
            change(&mut other);
            assert!(!verify(&KEY, &Log::of(&other, "a"), &t), "change {i}");
        }
        // Each kind only covers its own fields: a chunk's ticket stands whatever the request's
        // unused task fields say, and is another chunk's nothing.
        let chunk = crate::AgentLogRequest {
            job_id: 7,
            divisible: true,
            chunk: 3,
            ..Default::default()
        };
        let c = sign(&KEY, &Log::of(&chunk, "a"));
        let mut noisy = chunk.clone();
        noisy.app = "x".into();
        assert!(verify(&KEY, &Log::of(&noisy, "a"), &c));
        let mut next = chunk.clone();
        next.chunk = 4;
        assert!(!verify(&KEY, &Log::of(&next, "a"), &c));
        // The same bytes split differently between a worker's fields.
        let w = |topology: &str, run_as: &str| crate::AgentLogRequest {
            topology: topology.into(),
            run_as: run_as.into(),
            ..Default::default()
        };
        let (ab, a) = (w("ab", ""), w("a", "b"));
        assert_ne!(Log::of(&ab, "n").message(), Log::of(&a, "n").message());
        assert!(!verify(&KEY, &Log::of(&req, "a"), &[]), "none");
    }
}
