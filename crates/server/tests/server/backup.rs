//! `hetsched server backup` and `restore` give back a working server: the backup holds the data
//! directory's tokens and secrets beside the store, and a restore writes them back (0600), so
//! the old admin, user and agent tokens are answered as before — on a new machine, or over a
//! data directory whose server had made tokens of its own.

use crate::common;

use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use hetsched_server::backup::{backup, restore};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("meta").permissions().mode() & 0o777
}

/// Whether the server on `data_dir` answers `token` (a `ListJobs`).
async fn answers(data_dir: &Path, token: &str) -> bool {
    let (server, channel) = common::serve(ServerConfig {
        data_dir: data_dir.to_path_buf(),
        ..Default::default()
    })
    .await;
    let ok =
        ClientClient::with_interceptor(channel, pb::TokenInterceptor::new(token).expect("ascii"))
            .list_jobs(pb::ListJobsRequest::default())
            .await
            .is_ok();
    server.stop().await.expect("stops");
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_server_answers_the_tokens_it_answered_when_backed_up() {
    let scratch = common::scratch("backup", "tokens");
    let (old, moved, taken) = (
        scratch.join("old"),
        scratch.join("new-machine"),
        scratch.join("taken"),
    );
    let (server, channel) = common::serve(ServerConfig {
        data_dir: old.clone(),
        ..Default::default()
    })
    .await;
    let admin = server.token.clone();
    let alice = ClientClient::with_interceptor(channel, common::client_token(&server))
        .add_user(pb::AddUserRequest {
            name: "alice".into(),
            ..Default::default()
        })
        .await
        .expect("alice")
        .into_inner()
        .token;
    server.stop().await.expect("stops");
    let file = scratch.join("backup.db");
    let b = backup(&old, &file).expect("backup");
    for name in ["token", "agent-token", "offload-secret"] {
        assert!(b.files.iter().any(|f| f == name), "{name}: {:?}", b.files);
    }

    // On a new machine: the data directory does not exist.
    let r = restore(&moved, &file).expect("restore");
    assert_eq!(r.replaced, None);
    assert_eq!(r.files, b.files);
    for name in &r.files {
        let path = moved.join(name);
        assert_eq!(mode(&path), 0o600, "{name}");
        assert_eq!(
            std::fs::read(&path).expect("restored"),
            std::fs::read(old.join(name)).expect("original"),
            "{name}"
        );
    }
    assert_eq!(mode(&moved), 0o700);
    // The store keeps no copy of them.
    let tables: i64 = rusqlite::Connection::open(&r.store)
        .expect("store")
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'hetsched_backup_files'",
            [],
            |row| row.get(0),
        )
        .expect("read");
    assert_eq!(tables, 0);
    assert!(answers(&moved, &admin).await, "the old admin token");
    assert!(answers(&moved, &alice).await, "alice's old token");

    // Over a data directory whose server made tokens of its own: they are set aside with the
    // store they went with, and the backup's take their place.
    let (server, _) = common::serve(ServerConfig {
        data_dir: taken.clone(),
        ..Default::default()
    })
    .await;
    let own = server.token.clone();
    server.stop().await.expect("stops");
    let r = restore(&taken, &file).expect("restore");
    let aside = r.replaced.expect("set aside");
    assert_eq!(mode(&aside), 0o700);
    assert_eq!(
        std::fs::read_to_string(aside.join("token"))
            .expect("kept")
            .trim(),
        own
    );
    assert!(answers(&taken, &admin).await, "the old admin token");
    assert!(!answers(&taken, &own).await, "the token it replaced");
}
