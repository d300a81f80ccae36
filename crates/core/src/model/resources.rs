//! Resource vectors: what a node offers and what a task variant asks for.

use serde::{Deserialize, Serialize};
use std::ops::{Add, Sub};

/// A vector of the resources a scheduler hands out: cores, memory and accelerators (GPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// CPU cores.
    pub cores: u32,
    /// Main memory in bytes.
    pub memory_bytes: u64,
    /// Accelerator devices.
    pub gpus: u32,
}

impl Resources {
    /// A vector of `cores` cores, `memory_bytes` bytes and `gpus` accelerators.
    pub const fn new(cores: u32, memory_bytes: u64, gpus: u32) -> Self {
        Self {
            cores,
            memory_bytes,
            gpus,
        }
    }

    /// Whether `request` fits in `self` in every dimension.
    pub fn fits(&self, request: &Resources) -> bool {
        request.cores <= self.cores
            && request.memory_bytes <= self.memory_bytes
            && request.gpus <= self.gpus
    }

    /// Dominant share of `self` against cluster `totals` (DRF, Ghodsi et al. 2011): the largest
    /// fraction of any one resource that this vector holds. Dimensions the cluster lacks are ignored.
    pub fn dominant_share(&self, totals: &Resources) -> f64 {
        let share = |used: f64, total: f64| if total > 0.0 { used / total } else { 0.0 };
        share(self.cores as f64, totals.cores as f64)
            .max(share(self.memory_bytes as f64, totals.memory_bytes as f64))
            .max(share(self.gpus as f64, totals.gpus as f64))
    }
}

impl Add for Resources {
    type Output = Resources;
    fn add(self, o: Resources) -> Resources {
        Resources {
            cores: self.cores + o.cores,
            memory_bytes: self.memory_bytes + o.memory_bytes,
            gpus: self.gpus + o.gpus,
        }
    }
}

impl Sub for Resources {
    type Output = Resources;
    /// Saturating: callers check [`Resources::fits`] first; saturation keeps a bookkeeping slip
    /// from wrapping around into a huge free pool.
    fn sub(self, o: Resources) -> Resources {
        Resources {
            cores: self.cores.saturating_sub(o.cores),
            memory_bytes: self.memory_bytes.saturating_sub(o.memory_bytes),
            gpus: self.gpus.saturating_sub(o.gpus),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_checks_every_dimension() {
        let node = Resources::new(6, 16 << 30, 4);
        assert!(node.fits(&Resources::new(6, 16 << 30, 4)));
        assert!(!node.fits(&Resources::new(7, 0, 0)));
        assert!(!node.fits(&Resources::new(0, (16 << 30) + 1, 0)));
        assert!(!node.fits(&Resources::new(0, 0, 5)));
    }

    #[test]
    fn dominant_share_is_the_largest_fraction() {
        let totals = Resources::new(36, 0, 24);
        // 12 GPUs of 24 outweighs 12 cores of 36.
        assert_eq!(Resources::new(12, 0, 12).dominant_share(&totals), 0.5);
        assert_eq!(Resources::new(18, 0, 0).dominant_share(&totals), 0.5);
        assert_eq!(Resources::default().dominant_share(&totals), 0.0);
    }
}
