//! `hetsched purge`: deletes finished jobs (every task succeeded, failed or cancelled) from the
//! server's memory and store (see `docs/runtime.md`, Retention). Jobs are chosen by id, by age
//! (`--older-than`: finished at least this long ago) or by count (`--keep N`: all but the N most
//! recently finished); a job any of these selects is purged. Needs the client token.

use super::ClientArgs;
use super::Output;
use super::client::{connect, json, refused};
use super::select::{self, JobItem};
use clap::Args;
use hetsched_core::text::count;
use hetsched_proto as pb;

/// `hetsched purge` arguments.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true)
    .args(["jobs", "older_than", "keep"])))]
pub struct PurgeArgs {
    /// Purge these finished jobs: ids or `last` (a job named so that is not finished refuses
    /// the whole request), ranges (`4-9`: the finished jobs listed in it) and `name:NAME` (the
    /// finished jobs listed with that name); separate with spaces or commas.
    #[arg(value_name = "JOB", value_delimiter = ',')]
    pub jobs: Vec<JobItem>,
    /// Purge every job that finished at least this long ago (e.g. `24h`, `30m`, `0s`).
    #[arg(long, value_name = "DURATION", value_parser = super::duration_flag)]
    pub older_than: Option<humantime::Duration>,
    /// Purge all finished jobs but the N most recently finished.
    #[arg(long, value_name = "N")]
    pub keep: Option<u64>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `hetsched purge`.
pub async fn run(args: &PurgeArgs) -> anyhow::Result<()> {
    let older = args.older_than.map(std::time::Duration::from);
    let job_ids = if args.jobs.is_empty() {
        Vec::new()
    } else {
        select::resolve_finished(&args.jobs, &args.client).await?
    };
    let reply = connect(&args.client)
        .await?
        .purge(pb::PurgeRequest {
            job_ids,
            has_older_than: older.is_some(),
            older_than_ms: older.map_or(0, |d| d.as_millis().min(u64::MAX as u128) as u64),
            has_keep: args.keep.is_some(),
            keep: args.keep.unwrap_or(0),
        })
        .await
        .map_err(refused)?
        .into_inner();
    match args.client.output {
        Output::Json => json(&reply),
        Output::Table | Output::Dot => {
            if !reply.already_purged.is_empty() {
                let ids: Vec<String> = reply.already_purged.iter().map(u64::to_string).collect();
                println!("already purged (nothing to do): {}", ids.join(", "));
            }
            if reply.purged.is_empty() {
                if reply.already_purged.is_empty() {
                    println!("no finished job to purge");
                }
            } else {
                let ids: Vec<String> = reply.purged.iter().map(u64::to_string).collect();
                println!(
                    "purged {} ({}): {}",
                    count(reply.purged.len() as u64, "job"),
                    count(reply.tasks, "task"),
                    ids.join(", ")
                );
            }
            Ok(())
        }
    }
}
