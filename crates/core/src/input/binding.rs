//! Binding event files, replayed by `hetsched binding replay`: one membership change per line,
//!
//! ```text
//! # comments and blank lines are allowed
//! add-nnode NAME RACK
//! add-anode NAME RACK [WEIGHT]   # WEIGHT: summed accelerator speed weights, default 1
//! remove NAME
//! ```
//!
//! A NAME is a node name ([`super::cluster::node_name_problem`]), a RACK a rack name
//! ([`crate::model::cluster::rack_name_problem`]), a WEIGHT a number in [`WEIGHT_RANGE`].
//!
//! Parsing checks each line's shape and names; what only the sequence can tell (a duplicate
//! name, removing a node that is not there) is checked when the lines are applied
//! ([`crate::policy::binding::replay`]). Both kinds of error name the line.

use super::cluster::{MAX_NODE_ACCELERATORS, SPEED_RANGE};
use super::{InputError, Source};

/// The range of an ANode's WEIGHT: what a cluster file's node can sum its accelerators' speeds
/// to (one at the slowest speed, 0.001, up to [`MAX_NODE_ACCELERATORS`] at the fastest, 1000).
/// Binding counts weights in thousandths, so a smaller weight was taken as 0.001 silently, and
/// `1e300` was taken too.
pub const WEIGHT_RANGE: std::ops::RangeInclusive<f64> =
    *SPEED_RANGE.start()..=*SPEED_RANGE.end() * MAX_NODE_ACCELERATORS as f64;

/// One membership change as written.
#[derive(Clone, Debug, PartialEq)]
pub enum BindingCommand {
    /// `add-nnode NAME RACK`.
    AddNNode {
        /// Node name.
        name: String,
        /// Rack name.
        rack: String,
    },
    /// `add-anode NAME RACK [WEIGHT]`.
    AddANode {
        /// Node name.
        name: String,
        /// Rack name.
        rack: String,
        /// Summed speed weight of its accelerators (1 when not written).
        weight: f64,
    },
    /// `remove NAME`.
    Remove {
        /// Node name.
        name: String,
    },
}

impl std::fmt::Display for BindingCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindingCommand::AddNNode { name, rack } => write!(f, "add-nnode {name} {rack}"),
            BindingCommand::AddANode { name, rack, weight } => {
                write!(f, "add-anode {name} {rack} {weight}")
            }
            BindingCommand::Remove { name } => write!(f, "remove {name}"),
        }
    }
}

/// A command and the line it was on.
#[derive(Clone, Debug, PartialEq)]
pub struct BindingLine {
    /// 1-based line number.
    pub line: usize,
    /// The command.
    pub command: BindingCommand,
}

/// Parses a binding event file; the first malformed line is an error naming it.
pub fn parse_binding_events(origin: &str, text: &str) -> Result<Vec<BindingLine>, InputError> {
    let src = Source::new(origin, text);
    let mut out = Vec::new();
    let mut offset = 0;
    for (i, raw) in text.split('\n').enumerate() {
        let line_start = offset;
        offset += raw.len() + 1;
        let content = raw.split('#').next().unwrap_or("");
        // Fields with their byte offsets, for the column of an error. The offsets come from the
        // characters themselves: a separator such as U+00A0 is more than one byte.
        let mut fields = Vec::new();
        let mut word = None;
        for (pos, c) in content.char_indices().chain([(content.len(), ' ')]) {
            match (c.is_whitespace(), word) {
                (false, None) => word = Some(pos),
                (true, Some(from)) => {
                    fields.push((line_start + from, &content[from..pos]));
                    word = None;
                }
                _ => {}
            }
        }
        let Some(&(verb_at, verb)) = fields.first() else {
            continue;
        };
        let end_of_line = line_start + content.trim_end().len();
        let usage = match verb {
            "add-nnode" => "add-nnode NAME RACK",
            "add-anode" => "add-anode NAME RACK [WEIGHT]",
            "remove" => "remove NAME",
            _ => {
                return Err(src.error(
                    Some(verb_at),
                    None,
                    format!(
                        "unknown event `{}`: expected add-nnode, add-anode or remove",
                        crate::text::clip(verb)
                    ),
                ));
            }
        };
        let (min, max) = match verb {
            "add-nnode" => (3, 3),
            "add-anode" => (3, 4),
            _ => (2, 2),
        };
        if fields.len() < min {
            let missing = ["NAME", "RACK"][fields.len() - 1];
            return Err(src.error(
                Some(end_of_line),
                None,
                format!("missing {missing}: expected `{usage}`"),
            ));
        }
        if fields.len() > max {
            return Err(src.error(
                Some(fields[max].0),
                None,
                format!(
                    "unexpected `{}`: expected `{usage}`",
                    crate::text::clip(fields[max].1)
                ),
            ));
        }
        // Names as a cluster file's: the trace prints them as written.
        let (name_at, name) = fields[1];
        if let Some(problem) = super::cluster::node_name_problem(name) {
            return Err(src.error(Some(name_at), Some("NAME".into()), problem));
        }
        if let Some(&(rack_at, rack)) = fields.get(2)
            && let Some(problem) = crate::model::cluster::rack_name_problem(rack)
        {
            return Err(src.error(Some(rack_at), Some("RACK".into()), problem));
        }
        let name = name.to_string();
        let command = match verb {
            "add-nnode" => BindingCommand::AddNNode {
                name,
                rack: fields[2].1.to_string(),
            },
            "add-anode" => {
                let weight = match fields.get(3) {
                    None => 1.0,
                    Some(&(at, w)) => match w.parse::<f64>() {
                        Ok(v) if WEIGHT_RANGE.contains(&v) => v,
                        parsed => {
                            // A number is echoed compactly (`1e300`, not as written out).
                            let given =
                                parsed.map_or_else(|_| crate::text::clip(w), super::units::shown);
                            return Err(src.error(
                                Some(at),
                                None,
                                format!(
                                    "invalid WEIGHT `{given}`: expected a number from {} to {} \
                                     (an ANode's accelerators' summed speeds: at most \
                                     {MAX_NODE_ACCELERATORS}, each {} to {})",
                                    super::units::shown(*WEIGHT_RANGE.start()),
                                    super::units::shown(*WEIGHT_RANGE.end()),
                                    super::units::shown(*SPEED_RANGE.start()),
                                    super::units::shown(*SPEED_RANGE.end()),
                                ),
                            ));
                        }
                    },
                };
                BindingCommand::AddANode {
                    name,
                    rack: fields[2].1.to_string(),
                    weight,
                }
            }
            _ => BindingCommand::Remove { name },
        };
        out.push(BindingLine {
            line: i + 1,
            command,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing test should panic with the error
mod tests {
    use super::*;

    #[test]
    fn comments_blank_lines_and_the_three_verbs() {
        let text = "# a rack\n\nadd-anode a1 r 2.5\nadd-nnode n1 r  # trailing\nremove n1\n";
        let lines = parse_binding_events("e.txt", text).unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].line, 3);
        assert_eq!(
            lines[0].command,
            BindingCommand::AddANode {
                name: "a1".into(),
                rack: "r".into(),
                weight: 2.5
            }
        );
        assert_eq!(lines[2].line, 5);
    }

    /// The ends of the range are weights: what a node of one slowest accelerator and a node of
    /// 256 fastest ones sum to.
    #[test]
    fn the_ends_of_the_weight_range_are_taken() {
        let lines =
            parse_binding_events("e.txt", "add-anode a r 0.001\nadd-anode b r 256000\n").unwrap();
        let weights: Vec<f64> = lines
            .iter()
            .map(|l| match l.command {
                BindingCommand::AddANode { weight, .. } => weight,
                _ => f64::NAN,
            })
            .collect();
        assert_eq!(weights, [0.001, 256000.0]);
    }

    #[test]
    fn bad_lines_name_their_line() {
        let err = |t: &str| parse_binding_events("e.txt", t).unwrap_err().to_string();
        assert_eq!(
            err("add-nnode n1 r\njump n2\n"),
            "e.txt:2:1: unknown event `jump`: expected add-nnode, add-anode or remove"
        );
        assert_eq!(
            err("\nadd-nnode n1\n"),
            "e.txt:2:13: missing RACK: expected `add-nnode NAME RACK`"
        );
        assert_eq!(
            err("remove\n"),
            "e.txt:1:7: missing NAME: expected `remove NAME`"
        );
        let range = "expected a number from 0.001 to 256000 (an ANode's accelerators' summed \
                     speeds: at most 256, each 0.001 to 1000)";
        assert_eq!(
            err("add-anode a r -1\n"),
            format!("e.txt:1:15: invalid WEIGHT `-1`: {range}")
        );
        // Past the range either way, echoed compactly; a weight below 0.001 was taken as 0.001.
        assert_eq!(
            err("add-anode a r 1e300\n"),
            format!("e.txt:1:15: invalid WEIGHT `1e300`: {range}")
        );
        assert_eq!(
            err(&format!("add-anode a r 0.{}1\n", "0".repeat(40))),
            format!("e.txt:1:15: invalid WEIGHT `1e-41`: {range}")
        );
        assert_eq!(
            err("add-anode a r 256000.5\n"),
            format!("e.txt:1:15: invalid WEIGHT `256000.5`: {range}")
        );
        assert_eq!(
            err("add-anode a r heavy\n"),
            format!("e.txt:1:15: invalid WEIGHT `heavy`: {range}")
        );
        assert_eq!(
            err("remove a b\n"),
            "e.txt:1:10: unexpected `b`: expected `remove NAME`"
        );
    }
}
