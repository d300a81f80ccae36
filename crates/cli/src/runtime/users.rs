//! `hetsched user add|remove|list|limit|whoami`: the admin gives each user a token of its own (see
//! docs/runtime.md, "Users"); a user's jobs are its own to change.

use super::client::{answer, connect, json, refused, table};
use super::{ClientArgs, UserCaps};
use anyhow::Context;
use hetsched_core::text::count;
use hetsched_proto as pb;
use std::io::Write;
use std::path::Path;

/// `hetsched user add NAME [--rotate] [--save FILE] [caps]`: prints the token, or writes it to
/// `save` (a new file, mode 0600) and says where.
pub async fn add(
    args: &ClientArgs,
    name: &str,
    rotate: bool,
    save: Option<&Path>,
    caps: UserCaps,
) -> anyhow::Result<()> {
    // Connected (the admin's token read) first, then the file made before the call: a path
    // that cannot be written costs no token, and a refusal before the call leaves no file.
    let mut client = connect(args).await?;
    let mut file = save.map(TokenFile::create).transpose()?;
    let reply = client
        .add_user(pb::AddUserRequest {
            name: name.to_string(),
            rotate,
            max_cores: caps.max_cores,
            max_gpus: caps.max_gpus,
            max_memory_bytes: caps.max_memory,
            shares: caps.shares,
            max_priority: match caps.max_priority {
                Some(super::PriorityCap::At(p)) => Some(p),
                _ => None,
            },
        })
        .await
        .map_err(refused)?
        .into_inner();
    let verb = if rotate { "has a new token" } else { "added" };
    match (file.as_mut(), save) {
        (Some(f), Some(p)) => {
            f.write_token(&reply.token)
                .with_context(|| format!("writing the token to {}", p.display()))?;
            let holder = f
                .give_to(&reply.name)
                .with_context(|| format!("giving {} to `{}`", p.display(), reply.name))?;
            if let Holder::Creator { note } = &holder {
                eprintln!("note: {}", note.replace("FILE", &p.display().to_string()));
            }
            let owned = match &holder {
                Holder::Account(name) => format!(", owned by account `{name}`"),
                Holder::Creator { .. } => String::new(),
            };
            answer(
                args,
                &serde_json::json!({"name": reply.name, "token_file": p}),
                |_| {
                    format!(
                        "user {} {verb}: its token is in {} (mode 0600{owned}); it passes \
                         `--token-file {}` or sets HETSCHED_TOKEN_FILE",
                        reply.name,
                        p.display(),
                        p.display()
                    )
                },
            )
        }
        _ => answer(args, &reply, |r| {
            format!(
                "user {} {verb}; its token (shown once: the server keeps only its hash):\n{}",
                r.name, r.token
            )
        }),
    }
}

/// `user add --save`'s file: made empty before the call, removed again unless a token was
/// written into it (a refused call, an error on the way) — if the path still names the file
/// made here, not one put in its place since.
struct TokenFile {
    file: std::fs::File,
    path: std::path::PathBuf,
    written: bool,
}

impl TokenFile {
    fn create(path: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            file: create_private(path)?,
            path: path.to_path_buf(),
            written: false,
        })
    }

    fn write_token(&mut self, token: &str) -> std::io::Result<()> {
        writeln!(self.file, "{token}")?;
        self.file.sync_all()?;
        self.written = true;
        Ok(())
    }
}

/// Who can read a token file `user add --save` wrote (mode 0600).
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    /// The Unix account of the user's name, given the file (run as root).
    Account(String),
    /// Whoever ran the command, as the file was made; `note` says so, and what to do
    /// (`FILE` stands for its path).
    Creator {
        /// What to print.
        note: String,
    },
}

/// What to do with a token file made by uid `me` for hetsched user `user`, whose Unix account
/// on this host is `account` (uid, primary gid; `Ok(None)`: none; `Err`: the lookup failed):
/// chown it to the account when run as root — the docs have the admin write
/// `/home/alice/.hetsched-token` for alice, and a root-owned 0600 file there is one she cannot
/// read — else keep it and say who can read it.
fn holder_plan(
    me: u32,
    user: &str,
    account: Result<Option<(u32, u32)>, String>,
) -> (Option<(u32, u32)>, Holder) {
    let creator = |note: String| (None, Holder::Creator { note });
    match (me, account) {
        (0, Ok(Some(ids))) => (Some(ids), Holder::Account(user.to_string())),
        (0, Ok(None)) => creator(format!(
            "FILE is root's (mode 0600): there is no Unix account `{user}` on this host to give \
             it to; hand the token to the user another way"
        )),
        (0, Err(e)) => creator(format!(
            "FILE is root's (mode 0600): looking up the Unix account `{user}` failed ({e}); \
             `chown` it to the user's account, or hand the token over another way"
        )),
        (_, Ok(Some((uid, _)))) if uid == me => (None, Holder::Account(user.to_string())),
        _ => creator(format!(
            "FILE is readable only by uid {me}, who ran this (mode 0600), not by the account of \
             user `{user}`: run `user add --save` as root to have it given to that account, \
             `chown` it, or hand the token over another way"
        )),
    }
}

impl TokenFile {
    /// Gives the file to the Unix account of hetsched user `user` where [`holder_plan`] says
    /// so (uid and primary gid; its mode stays 0600), and says who holds it.
    fn give_to(&self, user: &str) -> anyhow::Result<Holder> {
        use hetsched_agent::run_as::{Account, RunAsError};
        use std::os::unix::fs::MetadataExt;
        let me = self.file.metadata()?.uid();
        let account = match Account::lookup("this host", user) {
            Ok(a) => Ok(Some((a.uid, a.gid))),
            Err(RunAsError::NoAccount { .. }) => Ok(None),
            // An account of uid 0 is root: the file is root's already.
            Err(RunAsError::Root { .. }) => Ok(Some((0, 0))),
            Err(e) => Err(e.to_string()),
        };
        let (chown, holder) = holder_plan(me, user, account);
        if let Some((uid, gid)) = chown {
            std::os::unix::fs::fchown(&self.file, Some(uid), Some(gid))?;
        }
        Ok(holder)
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if self.written {
            return;
        }
        let same = match (self.file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(ours), Ok(there)) => ours.dev() == there.dev() && ours.ino() == there.ino(),
            _ => false,
        };
        if same {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A new file at `path` that only this user can read, refused if it exists (a token is never
/// written over another file).
fn create_private(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| {
            format!(
                "creating {} for the token (it must not exist)",
                path.display()
            )
        })
}

/// `hetsched user limit NAME [--max-cores N] [--max-memory SIZE] [--max-gpus N]`.
pub async fn limit(args: &ClientArgs, name: &str, caps: UserCaps) -> anyhow::Result<()> {
    let reply = connect(args)
        .await?
        .limit_user(pb::LimitUserRequest {
            name: name.to_string(),
            max_cores: caps.max_cores,
            max_gpus: caps.max_gpus,
            max_memory_bytes: caps.max_memory,
            shares: caps.shares,
            max_priority: match caps.max_priority {
                Some(super::PriorityCap::At(p)) => Some(p),
                _ => None,
            },
            no_max_priority: caps.max_priority == Some(super::PriorityCap::None),
        })
        .await
        .map_err(refused)?
        .into_inner();
    if args.output == super::Output::Json {
        return json(&user_json(&reply));
    }
    answer(args, &reply, |u| {
        let caps = [
            (u.max_cores > 0).then(|| count(u.max_cores, "core")),
            (u.max_memory_bytes > 0).then(|| format!("{} of memory", size(u.max_memory_bytes))),
            (u.max_gpus > 0).then(|| count(u.max_gpus, "GPU")),
        ];
        let caps: Vec<String> = caps.into_iter().flatten().collect();
        let cap = if caps.is_empty() {
            "no cap".to_string()
        } else {
            format!("at most {} at once", caps.join(", "))
        };
        let priority = u.max_priority.map_or("any priority".to_string(), |p| {
            format!("priority at most {p}")
        });
        format!(
            "user {}: {cap}, {} fair-share {}, {priority} (its running tasks hold {}, {} \
             of memory and {} now)",
            u.name,
            u.shares,
            if u.shares == 1 { "share" } else { "shares" },
            count(u.cores, "core"),
            size(u.memory_bytes),
            count(u.gpus, "GPU")
        )
    })
}

/// A user as `user limit` and `user list` print it in JSON: the server's fields, with `null`
/// for a cap the user does not have (the server sends 0) and for the fair-share usage without
/// `[fair_share]` — the object of the HTTP API's `/api/users` ([`hetsched_server::json::user`],
/// one builder for both).
fn user_json(u: &pb::UserInfo) -> serde_json::Value {
    hetsched_server::json::user(u)
}

/// A size in bytes as `user limit` and `user list` print it (`64 GiB`).
fn size(bytes: u64) -> String {
    bytesize::ByteSize(bytes).to_string()
}

/// `hetsched user remove NAME`.
pub async fn remove(args: &ClientArgs, name: &str) -> anyhow::Result<()> {
    let reply = connect(args)
        .await?
        .remove_user(pb::RemoveUserRequest {
            name: name.to_string(),
        })
        .await
        .map_err(refused)?
        .into_inner();
    answer(args, &reply, |r| {
        format!(
            "user {name} removed: its token is refused from now on; {} of its jobs had not \
             finished (they go on, still its own)",
            r.unfinished_jobs
        )
    })
}

/// `hetsched user list`.
pub async fn list(args: &ClientArgs) -> anyhow::Result<()> {
    let reply = connect(args)
        .await?
        .list_users(pb::ListUsersRequest {})
        .await
        .map_err(refused)?
        .into_inner();
    if args.output == super::Output::Json {
        let users: Vec<_> = reply.users.iter().map(user_json).collect();
        return json(&users);
    }
    let mut t = table(&[
        "user",
        "token made",
        "jobs",
        "unfinished",
        "cores held",
        "max cores",
        "memory held",
        "max memory",
        "GPUs held",
        "max GPUs",
        "fair-share usage",
        "shares",
        "max priority",
    ]);
    for u in &reply.users {
        t.add_row(super::human::row(vec![
            u.name.clone(),
            super::human::rfc3339(u.created_ms.saturating_mul(1_000_000)).unwrap_or_default(),
            u.jobs.to_string(),
            u.unfinished_jobs.to_string(),
            u.cores.to_string(),
            if u.max_cores == 0 {
                "-".to_string()
            } else {
                u.max_cores.to_string()
            },
            size(u.memory_bytes),
            if u.max_memory_bytes == 0 {
                "-".to_string()
            } else {
                size(u.max_memory_bytes)
            },
            u.gpus.to_string(),
            if u.max_gpus == 0 {
                "-".to_string()
            } else {
                u.max_gpus.to_string()
            },
            // Share-seconds as cluster-hours: 1.0 is the whole cluster for an hour.
            // (`-`: no fair share, so no usage to speak of.)
            u.fair_usage
                .map_or("-".to_string(), |f| format!("{:.3} cluster·h", f / 3600.0)),
            u.shares.to_string(),
            u.max_priority.map_or("-".to_string(), |p| p.to_string()),
        ]));
    }
    println!("{t}");
    Ok(())
}

/// Who the token in `args` says the caller is.
pub async fn whoami_name(args: &ClientArgs) -> anyhow::Result<pb::WhoAmIReply> {
    Ok(connect(args)
        .await?
        .who_am_i(pb::WhoAmIRequest {})
        .await
        .map_err(refused)?
        .into_inner())
}

/// `hetsched user whoami`: who the token is, and which hetsched version the server runs (the
/// call every user may make; this client's own is `hetsched --version`).
pub async fn whoami(args: &ClientArgs) -> anyhow::Result<()> {
    let reply = whoami_name(args).await?;
    if args.output == super::Output::Json {
        let mut v = serde_json::to_value(&reply)?;
        // Unknown: a server that predates saying it.
        if reply.server_version.is_empty() {
            v["server_version"] = serde_json::Value::Null;
        }
        return json(&v);
    }
    // Standard output stays the one line scripts read (`me=$(hetsched user whoami)`); the
    // versions are for the person at the terminal, on standard error.
    eprintln!("{}", super::human::shown(&versions_line(&reply)));
    answer(args, &reply, whoami_line)
}

/// `whoami`'s table output: who the token is.
fn whoami_line(r: &pb::WhoAmIReply) -> String {
    if r.admin {
        format!("{} (the admin token)", r.name)
    } else {
        r.name.clone()
    }
}

/// The server's version and this client's, as `whoami` says them on standard error.
fn versions_line(r: &pb::WhoAmIReply) -> String {
    let server = if r.server_version.is_empty() {
        "of an unknown version (older than version reporting)"
    } else {
        &r.server_version
    };
    format!(
        "server: hetsched {server} (this client: {})",
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run as root, the file goes to the account of the user's name (uid and primary gid);
    /// without such an account, or run by anyone else, it stays its maker's and a note says
    /// who can read it and what to do.
    #[test]
    fn a_saved_token_goes_to_the_users_account_only_when_root_can_give_it() {
        assert_eq!(
            holder_plan(0, "alice", Ok(Some((1001, 100)))),
            (Some((1001, 100)), Holder::Account("alice".into()))
        );
        let (chown, holder) = holder_plan(0, "alice", Ok(None));
        assert_eq!(chown, None);
        assert!(
            matches!(&holder, Holder::Creator { note } if note.contains("FILE is root's") && note.contains("no Unix account `alice`")),
            "{holder:?}"
        );
        let (chown, holder) = holder_plan(1000, "alice", Ok(Some((1001, 100))));
        assert_eq!(chown, None);
        assert!(
            matches!(&holder, Holder::Creator { note } if note.contains("readable only by uid 1000") && note.contains("run `user add --save` as root")),
            "{holder:?}"
        );
        // A user saving its own name's token as itself reads it already.
        assert_eq!(
            holder_plan(1001, "alice", Ok(Some((1001, 100)))),
            (None, Holder::Account("alice".into()))
        );
    }
}
