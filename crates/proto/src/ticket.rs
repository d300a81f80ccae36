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
//! - **Log tickets** (`hetsched log`, `hetsched topology log`). The server relays a user's read
//!   of task output to the agent that holds it (`AgentLogs.ReadLog`), and signs each relayed
//!   request with that agent's data key (`AgentLogRequest.ticket`): HMAC-SHA256 over
//!   [`LOG_LABEL`], the file the request names ([`LogFile`]: a task's attempt, a divisible
//!   chunk, or a stream worker), the stream, and the agent's node name ([`Log`]). The agent
//!   serves a page only when its key verifies the ticket for exactly what the request names and
//!   itself: the agent token alone (every agent holds it) reads no one's output.
//!
//! The keys are different (the server derives them with different labels; fetch and log
//! tickets share a node's data key), and so are the labels the MACs start with: no ticket of one
//! kind passes for a ticket of another.
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
    },
    /// A divisible job's chunk.
    Chunk {
        /// The divisible job.
        job_id: u64,
        /// The chunk's number.
        chunk: u64,
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
            }
        } else {
            LogFile::Task {
                job_id: req.job_id,
                app: &req.app,
                index: req.index,
                process: req.process,
                attempt: req.attempt,
            }
        };
        Self {
            file,
            stderr: req.stderr,
            node,
        }
    }
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

impl Ticketed for Log<'_> {
    fn message(&self) -> Vec<u8> {
        // A tag says which kind of file the fields that follow name: no task's fields encode
        // as a chunk's or a worker's.
        let m = match self.file {
            LogFile::Task {
                job_id,
                app,
                index,
                process,
                attempt,
            } => Message::new(
                LOG_LABEL,
                4 + 8 + 8 + app.len() + 12 + 4 + 8 + self.node.len(),
            )
            .u32(1)
            .u64(job_id)
            .str(app)
            .u32(index)
            .u32(process)
            .u32(attempt),
            LogFile::Chunk { job_id, chunk } => {
                Message::new(LOG_LABEL, 4 + 16 + 4 + 8 + self.node.len())
                    .u32(2)
                    .u64(job_id)
                    .u64(chunk)
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

    /// The labels keep the kinds apart: no message of one kind is a message of another.
    #[test]
    fn no_offload_ticket_passes_for_a_fetch_ticket() {
        let o = offload().message();
        let f = fetch().message();
        let l = Log::of(&task_read(), "a").message();
        assert!(o.starts_with(TICKET_LABEL) && f.starts_with(FETCH_LABEL));
        assert!(l.starts_with(LOG_LABEL));
        let labels = [TICKET_LABEL, FETCH_LABEL, LOG_LABEL];
        for (i, a) in labels.iter().enumerate() {
            for (j, b) in labels.iter().enumerate() {
                assert!(i == j || !a.starts_with(b), "{i} {j}");
            }
        }
    }

    fn task_read() -> crate::AgentLogRequest {
        crate::AgentLogRequest {
            job_id: 7,
            app: "sim".into(),
            index: 3,
            attempt: 2,
            stderr: true,
            ..Default::default()
        }
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
        let changes: [fn(&mut crate::AgentLogRequest); 12] = [
            |r| r.job_id = 8,
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
