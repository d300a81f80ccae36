//! Typed identifiers, so a node index can never be passed where an application index is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl $name {
            /// The identifier as an index into a dense table.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A node (a machine that runs tasks), dense from 0 in the order nodes were added.
    NodeId(u32), "node"
);
id_type!(
    /// A rack: a group of nodes behind one switch.
    RackId(u32), "rack"
);
id_type!(
    /// An application (a job of independent tasks), dense from 0 in submission order.
    AppId(u32), "app"
);
id_type!(
    /// A task, unique across all applications of one scheduler.
    TaskId(u64), "task"
);
