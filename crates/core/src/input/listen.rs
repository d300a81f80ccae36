//! Listening addresses: the server's `--listen` and `--http-listen` (`listen`, `http_listen` in
//! its configuration file), an agent's `--log-listen` and `--accel-listen` (`log_listen`,
//! `accel_listen`). Each is an IP address and a port. A host name is refused with the forms
//! taken rather than resolved: `localhost` resolves to `::1` and to `127.0.0.1`, and binding
//! one of them would listen where the operator may not expect (clients trying the other would
//! find nothing). The refusal replaces the standard library's bare `invalid socket address
//! syntax`, which named neither the flag nor what to give.

use std::net::SocketAddr;

/// A listening address that is not an IP address and a port.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "give an IP address and port (127.0.0.1:{port} for this host only, 0.0.0.0:{port} for every \
     interface)"
)]
pub struct ListenError {
    /// The port given, for the examples (`PORT` when none could be read).
    port: String,
}

/// `text` as a listening address: `IP:PORT` (`[IPv6]:PORT`).
pub fn parse(text: &str) -> Result<SocketAddr, ListenError> {
    text.trim().parse().map_err(|_| ListenError {
        port: text
            .rsplit_once(':')
            .and_then(|(_, p)| p.trim().parse::<u16>().ok())
            .map_or_else(|| "PORT".to_string(), |p| p.to_string()),
    })
}

/// A configuration file's listening address (`#[serde(deserialize_with = …)]`), refused as
/// [`parse`] refuses it.
pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    parse(&text).map_err(|e| serde::de::Error::custom(format!("`{text}`: {e}")))
}

/// An agent's listener in its configuration file (`log_listen`, `accel_listen`): an address as
/// [`deserialize`] reads it, or `none` for no listener, as the flags take it: `Some(None)`.
/// Absent from the file (`#[serde(default)]`): `None`.
pub fn deserialize_or_none<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<SocketAddr>>, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    if text.trim() == "none" {
        return Ok(Some(None));
    }
    parse(&text)
        .map(|a| Some(Some(a)))
        .map_err(|e| serde::de::Error::custom(format!("`{text}`: {e}, or none for no listener")))
}

/// [`deserialize`] of an optional address.
pub fn deserialize_option<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<SocketAddr>, D::Error> {
    deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ip_and_port_is_taken_and_a_host_name_is_refused_with_the_forms_taken() {
        assert_eq!(
            parse("127.0.0.1:7420"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 7420)))
        );
        assert_eq!(parse("[::1]:0").map(|a| a.port()), Ok(0));
        assert_eq!(
            parse("localhost:7420").map_err(|e| e.to_string()),
            Err(
                "give an IP address and port (127.0.0.1:7420 for this host only, 0.0.0.0:7420 \
                 for every interface)"
                    .to_string()
            )
        );
        assert!(
            parse("127.0.0.1")
                .map_err(|e| e.to_string())
                .is_err_and(|e| e.contains("127.0.0.1:PORT for this host only"))
        );
    }
}
