//! A user's fair-share shares and caps (Slurm's `Shares` and `MaxTRESPerUser`) as a simulator
//! workload's `[[user]]` tables give them (`crate::input::workload::UserSpec`). The runtime keeps
//! the same two per user in its store (`hetsched user add|limit`). Either way a user is one group
//! of the [`super::SchedulerView`]: its shares go to `set_fair_shares`, its caps to
//! `set_group_cap`, so every policy obeys them without knowing where they came from.

use super::Resources;
use serde::{Deserialize, Serialize};

/// The most fair-share shares a user may have (Slurm's `Shares`, the runtime's
/// `hetsched user limit --shares`).
pub const MAX_SHARES: u32 = 1_000_000;

/// One user's shares and caps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserLimits {
    /// The user, as applications name it (`user = "alice"`).
    pub name: String,
    /// Fair-share shares, 1 to [`MAX_SHARES`]: under fair share its usage is divided by them, so
    /// 2 shares may use twice what 1 does before falling behind.
    pub shares: u32,
    /// The most its running tasks hold at once, per resource; 0 in a dimension: no cap on it
    /// (the convention of [`super::SchedulerView::set_group_cap`]).
    pub cap: Resources,
}

impl UserLimits {
    /// A user with 1 share and no caps: what a user no `[[user]]` table names gets.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            shares: 1,
            cap: Resources::default(),
        }
    }

    /// The cap on cores, if any.
    pub fn max_cores(&self) -> Option<u32> {
        (self.cap.cores > 0).then_some(self.cap.cores)
    }

    /// The cap on memory in bytes, if any.
    pub fn max_memory_bytes(&self) -> Option<u64> {
        (self.cap.memory_bytes > 0).then_some(self.cap.memory_bytes)
    }

    /// The cap on GPUs, if any.
    pub fn max_gpus(&self) -> Option<u32> {
        (self.cap.gpus > 0).then_some(self.cap.gpus)
    }
}
