//! Applying a parsed binding event file ([`crate::input::binding`]) to a [`Binding`], line by line,
//! so both `hetsched binding replay` and tests drive the one implementation. A change the binding
//! refuses (a duplicate name, removing a node that is not there) becomes an [`InputError`] naming
//! the line.

use super::{Binding, BindingEvent, BindingMode};
use crate::input::InputError;
use crate::input::binding::{BindingCommand, BindingLine};

/// Applies `lines` in order under `mode`; `on_step` sees each line, the events it caused and the
/// binding after it. Stops at the first refused line.
pub fn replay(
    origin: &str,
    lines: &[BindingLine],
    mode: BindingMode,
    on_step: &mut dyn FnMut(&BindingLine, &[BindingEvent], &Binding),
) -> Result<Binding, InputError> {
    let mut binding = Binding::new(mode);
    for l in lines {
        let result = match &l.command {
            BindingCommand::AddNNode { name, rack } => binding.add_nnode(name, rack),
            BindingCommand::AddANode { name, rack, weight } => {
                binding.add_anode(name, rack, *weight)
            }
            BindingCommand::Remove { name } => binding.remove(name),
        };
        let events = result.map_err(|e| InputError {
            origin: origin.to_string(),
            line: Some(l.line),
            column: None,
            field: None,
            message: format!("{}: {e}", l.command),
        })?;
        on_step(l, &events, &binding);
    }
    Ok(binding)
}

impl Binding {
    /// The map as `NNODE -> ANODE` lines sorted by NNode name (then container), `NNODE -> unbound`
    /// for a unit that waits.
    pub fn map_lines(&self) -> Vec<String> {
        self.map()
            .into_iter()
            .map(|(u, a)| match a {
                Some(a) => format!("{u} -> {a}"),
                None => format!("{u} -> unbound"),
            })
            .collect()
    }
}
