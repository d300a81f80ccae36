//! The format of the server's and the agent's own log: `--log-format` (`log_format` in their
//! configuration files). One type for both, so that the two read and refuse the same words.

use serde::Deserialize;
use std::fmt;

/// How each line of the process's log is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Text for people: time, level, target, message and fields.
    #[default]
    Text,
    /// One JSON object a line, for a log collector.
    Json,
}

impl LogFormat {
    /// Every format, in the order help and errors list them.
    pub const ALL: [LogFormat; 2] = [LogFormat::Text, LogFormat::Json];

    /// The word a flag or a configuration file gives.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is no [`LogFormat`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is no log format: give text or json")]
pub struct UnknownLogFormat(pub String);

impl std::str::FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LogFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownLogFormat(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::LogFormat;

    #[test]
    fn a_log_format_reads_as_written_and_another_word_is_refused_naming_the_choices() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        let e = "xml".parse::<LogFormat>().expect_err("no such format");
        assert_eq!(e.to_string(), "`xml` is no log format: give text or json");
        for f in LogFormat::ALL {
            assert_eq!(f.as_str().parse::<LogFormat>(), Ok(f));
        }
    }
}
