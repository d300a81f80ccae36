//! Whether a server reached over plain `http://` in fact speaks TLS, or one reached over
//! `https://` answers in plain text: the one diagnosis the client commands and the agent give
//! for a URL whose scheme needs changing.

use std::time::Duration;

/// Sends the HTTP/2 preface to `url`'s address and reads the first two bytes of the answer: a
/// TLS alert (0x15) or handshake (0x16) record of version 3.x says the server expects TLS
/// (a TLS server answers plain bytes with an alert). A connection closed or reset without them
/// says nothing: a plain server dying mid-call (killed, restarted) looks the same, and taking
/// it for TLS would end an agent that should wait for the server to come back. False for any
/// URL not `http://`, or when the address does not answer within 2 s.
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
        let mut head = [0u8; 2];
        s.read_exact(&mut head).await.ok()?;
        Some(is_tls_record(head))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Some(true))
    )
}

/// Whether a call over `https://` failed because the server answered in plain text: rustls reads
/// its HTTP/2 bytes as a TLS record of a type that does not exist (`InvalidContentType`),
/// somewhere in the error's chain of causes.
pub fn answered_in_plain(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(c) = cause {
        if c.to_string().contains("InvalidContentType") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Whether a call failed before anything answered at the server's address: the TCP connection
/// was refused, timed out or had no route, or the name did not resolve (somewhere in the
/// error's chain of causes). Nothing that never answered TCP is a TLS server, so [`speaks_tls`]
/// need not ask it: against a host that drops packets that question would add its whole 2 s
/// wait to every retry.
pub fn never_connected(error: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cause = Some(error);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::TimedOut
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
                    | ErrorKind::AddrNotAvailable
            )
        {
            return true;
        }
        let text = c.to_string();
        if text.contains("tcp connect error") || text.contains("dns error") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Whether `head`, the first two bytes a server sent, start a TLS alert or handshake record.
fn is_tls_record(head: [u8; 2]) -> bool {
    matches!(head, [0x15 | 0x16, 0x03])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A listener on loopback that reads what a client sends, answers `answer` and closes.
    async fn answering(answer: &'static [u8]) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            if let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 64];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer).await;
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_tls_alert_says_tls_and_a_closed_connection_does_not() {
        // What a rustls server answers to the HTTP/2 preface: a fatal decode_error alert.
        assert!(speaks_tls(&answering(b"\x15\x03\x03\x00\x02\x02\x32").await).await);
        // A plain server killed mid-call: the connection closes with nothing said. (Taken for
        // TLS, this ended agents whose server was restarted.)
        assert!(!speaks_tls(&answering(b"").await).await);
        // A plain HTTP/2 server: a SETTINGS frame.
        assert!(!speaks_tls(&answering(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00").await).await);
        // Nothing listening.
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        drop(l);
        assert!(!speaks_tls(&format!("http://{addr}")).await);
        assert!(!speaks_tls("https://127.0.0.1:1").await);
    }

    /// The status of a gRPC call to `url`, as the agent's calls fail.
    async fn call(url: &str) -> tonic::Status {
        let channel = tonic::transport::Endpoint::from_shared(url.to_string())
            .expect("url")
            .connect_lazy();
        hetsched_proto::agent_client::AgentClient::new(channel)
            .heartbeat(hetsched_proto::HeartbeatRequest::default())
            .await
            .expect_err("nothing there speaks gRPC")
    }

    #[tokio::test]
    async fn a_refused_connection_never_connected_and_an_answer_did() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        drop(l);
        let refused = call(&format!("http://{addr}")).await;
        assert!(never_connected(&refused), "{refused:?}");
        // What a TLS server does with plain HTTP/2: an alert, then the connection closes. This
        // is the failure the agent must still ask `speaks_tls` about.
        let alert = call(&answering(b"\x15\x03\x03\x00\x02\x02\x32").await).await;
        assert!(!never_connected(&alert), "{alert:?}");
        let closed = call(&answering(b"").await).await;
        assert!(!never_connected(&closed), "{closed:?}");
    }
}
