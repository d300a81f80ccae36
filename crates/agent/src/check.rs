//! `hetsched agent --check`: what a start would refuse, found without starting. An operator
//! rolling out agent configurations to many nodes (or an allocation's agents about to start on
//! nodes nobody watches) learns of a refused setting, a work directory the agent may not use or
//! a token the server does not take now, not from each agent's log after it exited. The check
//! creates, locks and registers nothing: it reads the work directory, and asks the server a
//! question that needs the agent token and changes nothing.

use crate::{AgentError, AgentOptions, mismatch, no_registration, run_as, workdir};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What the check found where no problem stops a start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The work directory as a start would find it.
    pub work_dir: WorkDir,
    /// Whether the server was asked (false with `ask_server` off).
    pub server_asked: bool,
}

/// The work directory's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkDir {
    /// Missing: a start makes it (0700).
    Missing,
    /// There and usable.
    Ready {
        /// Open to other users, which a start closes (0700).
        opened: bool,
    },
    /// Another process holds its lock: an agent runs there (its pid, if readable). A second
    /// agent would wait for it ([`crate::guard`]).
    Held(Option<u32>),
}

/// Checks `opts` as [`crate::run`] would before it registers: the time limit against the kill
/// grace, `--run-as-owner`'s conditions, the work directory (path, owner, kind, lock) and, with
/// `ask_server`, that the server answers at its URL and takes the agent token.
pub async fn check(opts: &AgentOptions, ask_server: bool) -> Result<Checked, AgentError> {
    crate::stop_margin(opts)?;
    let dir = std::path::absolute(&opts.work_dir).map_err(|e| {
        AgentError::Config(format!("work directory {}: {e}", opts.work_dir.display()))
    })?;
    if opts.run_as_owner {
        run_as::check_agent(&dir).map_err(|e| AgentError::Config(e.to_string()))?;
    }
    if let Some(problem) = workdir::placeholder_problem(&dir) {
        return Err(AgentError::Config(format!("work directory {problem}")));
    }
    let work_dir = inspect(&dir)
        .map_err(|e| AgentError::Config(format!("work directory {}: {e}", dir.display())))?;
    if ask_server {
        ask(opts).await?;
    }
    Ok(Checked {
        work_dir,
        server_asked: ask_server,
    })
}

/// The work directory as [`workdir::prepare_for`] and the lock would find it, read only.
fn inspect(dir: &Path) -> Result<WorkDir, String> {
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(WorkDir::Missing),
        Err(e) => return Err(e.to_string()),
        Ok(m) => m,
    };
    if meta.file_type().is_symlink() {
        return Err(
            "the work directory is a symbolic link; an agent refuses to use it (give the real \
             directory)"
                .into(),
        );
    }
    if !meta.is_dir() {
        return Err("not a directory".into());
    }
    let me = workdir::euid();
    if meta.uid() != me {
        return Err(format!(
            "owned by user {}, not by this agent's user ({me}); an agent refuses to use it",
            meta.uid()
        ));
    }
    if held(dir) {
        return Ok(WorkDir::Held(workdir::lock_holder(dir)));
    }
    Ok(WorkDir::Ready {
        opened: meta.mode() & 0o077 != 0,
    })
}

/// Whether another process holds the work directory's lock: a shared lock, asked without
/// waiting on a descriptor opened read-only, is refused while an agent holds its exclusive one,
/// and leaves the lock file (and the pid in it) as it was.
fn held(dir: &Path) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(workdir::no_follow())
        .open(dir.join(workdir::LOCK))
    else {
        return false;
    };
    matches!(
        Flock::lock(file, FlockArg::LockSharedNonblock),
        Err((_, nix::errno::Errno::EWOULDBLOCK))
    )
}

/// Asks the server, with the agent token, which purged jobs an unregistered node holds: a
/// question only an agent may ask, answered "register first" without changing anything.
async fn ask(opts: &AgentOptions) -> Result<(), AgentError> {
    use hetsched_proto as pb;
    let endpoint = pb::endpoint(&opts.server, opts.ca_pem.as_deref())?;
    let interceptor = pb::TokenInterceptor::new(&opts.token)
        .map_err(|e| AgentError::Config(format!("token: {e}")))?;
    let channel = endpoint.connect_lazy();
    let mut client = pb::agent_client::AgentClient::with_interceptor(channel, interceptor);
    // The name, with the identity a start would register with (none yet: a new work
    // directory), so the server says whether a live agent of another identity holds it. Read,
    // never made: the check creates nothing.
    let identity =
        crate::workdir::open_regular(&opts.work_dir.join(crate::workdir::IDENTITY), false)
            .and_then(|f| {
                use std::io::Read;
                let mut text = String::new();
                f.take(256).read_to_string(&mut text)?;
                Ok(text.trim().to_string())
            })
            .unwrap_or_default();
    let mut request = tonic::Request::new(pb::PurgedJobsRequest {
        name: opts.name.clone(),
        identity,
        ..Default::default()
    });
    request.set_timeout(std::time::Duration::from_secs(10));
    let s = match client.purged_jobs(request).await {
        Ok(_) => return Ok(()),
        Err(s) => s,
    };
    if s.code() == tonic::Code::Unimplemented {
        return Err(no_registration(&opts.server));
    }
    if let Some(e) = mismatch(&opts.server, &s).await {
        return Err(e);
    }
    match s.code() {
        // Taken: the server looked for the node.
        tonic::Code::FailedPrecondition => Ok(()),
        tonic::Code::Unauthenticated => Err(AgentError::Unauthenticated(s.message().to_string())),
        tonic::Code::PermissionDenied => Err(AgentError::Refused(s.message().to_string())),
        // The node name is a live agent's of another identity: a start would be refused.
        tonic::Code::AlreadyExists => Err(AgentError::Refused(s.message().to_string())),
        _ if crate::unreachable(&s) => Err(AgentError::Config(format!(
            "the server at {} did not answer: {}",
            opts.server,
            s.message()
        ))),
        code => Err(AgentError::Config(format!(
            "the server at {} answered {code:?}: {}",
            opts.server,
            s.message()
        ))),
    }
}
