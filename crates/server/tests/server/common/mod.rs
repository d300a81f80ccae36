//! Helpers shared by the server's in-process tests.

use hetsched_proto as pb;

/// The identity every test agent registers and heartbeats with (unless a test forges another).
pub const IDENTITY: &str = "test-agent-identity";

/// A heartbeat from `node` reporting `running` (task, attempt) and `results` (task, attempt,
/// success); everything else default.
pub fn heartbeat_request(
    node: u32,
    running: &[(u64, u32)],
    results: &[(u64, u32, bool)],
) -> pb::HeartbeatRequest {
    pb::HeartbeatRequest {
        node_id: node,
        running: running
            .iter()
            .map(|&(task_id, attempt)| pb::RunningTask {
                task_id,
                attempt,
                read_bytes: 0,
            })
            .collect(),
        results: results
            .iter()
            .map(|&(task_id, attempt, success)| pb::TaskResult {
                task_id,
                attempt,
                exit_code: if success { 0 } else { 1 },
                success,
                started_ns: 1,
                finished_ns: 2,
                ..Default::default()
            })
            .collect(),
        identity: IDENTITY.into(),
        ..Default::default()
    }
}
