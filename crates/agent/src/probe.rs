//! Whether a server reached over plain `http://` in fact speaks TLS: the one diagnosis the
//! client commands and the agent give for a URL that needs `https://`.

use std::time::Duration;

/// Sends the HTTP/2 preface to `url`'s address and reads the first byte of the answer: a TLS
/// alert (0x15) or handshake (0x16) record, or a closed connection, says the server expects TLS.
/// False for any URL not `http://`, or when the address does not answer within 2 s.
pub async fn speaks_tls(url: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(authority) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = authority.split('/').next().unwrap_or(authority);
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(authority).await.ok()?;
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .ok()?;
        let mut first = [0u8; 1];
        match s.read(&mut first).await {
            Ok(0) => Some(true),
            Ok(_) => Some(first[0] == 0x15 || first[0] == 0x16),
            Err(_) => Some(true),
        }
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Some(true))
    )
}
