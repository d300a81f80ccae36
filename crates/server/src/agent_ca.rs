//! The server as its agents' certificate authority: with `[tls]` and no `agent_ca`, agents need
//! no certificates of their own for TLS on their listeners (task output, workflow data, PCDDB).
//!
//! At its first start such a server creates a CA — an ECDSA P-256 key and a self-signed
//! certificate, `DATA_DIR/agent-ca.key` (mode 0600) and `agent-ca.pem` — and keeps it. An agent
//! that reaches the server over TLS without `--log-cert` generates a key pair, keeps the private
//! key in memory, and asks the server (`Agent.ListenerCertificate`, agent token) to certify the
//! public key ([`AgentCa::certify`]). The certificate names the IP address the request came from
//! — the address the server calls the agent's log listener at — and the host the agent
//! advertises to its peers, and is valid for a year; an agent asks again at each start. An
//! advertised IP address must be the caller's ([`AgentCa::certify`]); an advertised DNS name
//! must resolve on the server's host to the caller's address ([`check_resolves_to`]) and be
//! advertised by no other live node, both checked by the service before it certifies: by node
//! when the request names its node and proves its identity
//! (`State::check_listener_name_for_node`), by the caller's address for an agent that predates
//! those fields (`State::check_listener_name`). Neither may be one of the server's own names
//! ([`ServerNames`]: its host name, what its `[tls]` certificate is valid for). The
//! server then calls every agent over TLS, checking certificates against this CA (as it would an
//! operator's `agent_ca`), and agents check each other's the same way: the reply carries the CA.
//! The private key never leaves the agent.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PublicKeyData, SanType,
    SignatureAlgorithm,
};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The CA's key in the data directory (PKCS #8 PEM, mode 0600).
pub const KEY_FILE: &str = "agent-ca.key";
/// The CA's certificate in the data directory (PEM).
pub const CERT_FILE: &str = "agent-ca.pem";

/// How long an agent's certificate is valid (an agent asks again at each start).
const AGENT_CERT_DAYS: i64 = 365;

/// An uncompressed P-256 point: `0x04`, then X and Y.
const P256_POINT_BYTES: usize = 65;

/// Why the CA could not be opened or could not certify a key.
#[derive(Debug, thiserror::Error)]
pub enum AgentCaError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// Key or certificate generation failed, or a stored key is not one.
    #[error("{0}")]
    Certificate(String),
}

/// The agents' CA.
pub struct AgentCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM: what the server and the agents trust for agents' listeners.
    pub cert_pem: String,
    /// The server's own names, never certified for an agent ([`ServerNames`]).
    pub server_names: ServerNames,
}

/// The server's own names, which no agent's certificate may name: its host name (and that
/// name's first label, what a search domain completes to it) and whatever its `[tls]`
/// certificate is valid for (DNS names, wildcards, IP addresses). A certificate for one of them
/// from the agents' CA would let an agent pass for the server to whoever trusts that CA.
#[derive(Default)]
pub struct ServerNames {
    /// The host name and its first label, lower case.
    hosts: Vec<String>,
    /// The server's certificate (DER), the first of its `[tls] cert` file.
    cert: Option<rustls::pki_types::CertificateDer<'static>>,
}

impl ServerNames {
    /// `hostname` (empty: none) and the first certificate of the PEM file `cert`, if any.
    pub fn new(hostname: &str, cert: Option<&Path>) -> Result<ServerNames, AgentCaError> {
        use rustls::pki_types::pem::PemObject;
        let host = hostname.trim().trim_end_matches('.').to_ascii_lowercase();
        let mut hosts = Vec::new();
        if !host.is_empty() {
            if let Some((first, _)) = host.split_once('.')
                && host.parse::<IpAddr>().is_err()
                && !first.is_empty()
            {
                hosts.push(first.to_string());
            }
            hosts.push(host);
        }
        let cert = match cert {
            None => None,
            Some(path) => Some(
                rustls::pki_types::CertificateDer::pem_file_iter(path)
                    .and_then(|mut certs| certs.next().transpose())
                    .map_err(|e| AgentCaError::Certificate(format!("{}: {e}", path.display())))?
                    .ok_or_else(|| {
                        AgentCaError::Certificate(format!(
                            "{}: no certificate in it",
                            path.display()
                        ))
                    })?,
            ),
        };
        if let Some(c) = &cert
            && let Err(e) = rustls::server::ParsedCertificate::try_from(c)
        {
            tracing::warn!(
                "the server's [tls] certificate could not be read for its names ({e}): only \
                 its host name is refused to agents"
            );
        }
        Ok(ServerNames { hosts, cert })
    }

    /// The server's host name as the kernel has it (`/proc/sys/kernel/hostname`); empty if
    /// unreadable.
    pub fn this_host() -> String {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    }

    /// Refuses `host` (a DNS name or IP address an agent advertises) if it is one of the
    /// server's own names.
    pub fn check(&self, host: &str) -> Result<(), String> {
        let h = host.trim().trim_end_matches('.');
        let refuse = |what: &str| {
            Err(format!(
                "advertised host `{h}` is {what}: the server certifies no agent for its own \
                 names; advertise a name of the agent's own, or give the agent --log-cert and \
                 --log-key from the operator's CA (the server's `[tls] agent_ca`)"
            ))
        };
        if self.hosts.iter().any(|own| own.eq_ignore_ascii_case(h)) {
            return refuse("the server's host name");
        }
        let Some(cert) = &self.cert else {
            return Ok(());
        };
        let Ok(name) = rustls::pki_types::ServerName::try_from(h) else {
            return Ok(());
        };
        let Ok(parsed) = rustls::server::ParsedCertificate::try_from(cert) else {
            return Ok(());
        };
        if rustls::client::verify_server_name(&parsed, &name).is_ok() {
            return refuse("a name the server's own TLS certificate is valid for");
        }
        Ok(())
    }
}

/// The CA's own parameters; the same at every start, so the kept key signs as the kept
/// certificate says.
fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "hetsched agent CA");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

fn cert_error(e: impl std::fmt::Display) -> AgentCaError {
    AgentCaError::Certificate(e.to_string())
}

impl AgentCa {
    /// The CA kept in `dir`, created there (key 0600, never through a symbolic link) if absent;
    /// a kept key open to others is made 0600 again.
    pub fn open(dir: &Path) -> Result<AgentCa, AgentCaError> {
        let (key_path, cert_path) = (dir.join(KEY_FILE), dir.join(CERT_FILE));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AgentCaError::Io { path, source }
        };
        match read_private(&key_path) {
            Ok(key_pem) => {
                let key = KeyPair::from_pem(&key_pem).map_err(|e| {
                    AgentCaError::Certificate(format!("{}: {e}", key_path.display()))
                })?;
                let cert_pem = std::fs::read_to_string(&cert_path).map_err(io(&cert_path))?;
                // One an earlier version made 0644 is made 0600, as the data directory's files.
                {
                    use std::os::unix::fs::{MetadataExt, PermissionsExt};
                    let meta = std::fs::symlink_metadata(&cert_path).map_err(io(&cert_path))?;
                    if meta.mode() & 0o077 != 0 && !meta.file_type().is_symlink() {
                        std::fs::set_permissions(
                            &cert_path,
                            std::fs::Permissions::from_mode(0o600),
                        )
                        .map_err(io(&cert_path))?;
                    }
                }
                Ok(AgentCa {
                    issuer: Issuer::new(ca_params(), key),
                    cert_pem,
                    server_names: ServerNames::default(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(cert_error)?;
                let cert = ca_params().self_signed(&key).map_err(cert_error)?;
                let cert_pem = cert.pem();
                // The certificate first: a key without its certificate is never left behind.
                // 0600 as every file of the data directory, though a certificate is no secret:
                // agents get it in the reply, and an operator as the server's user can copy it.
                write_new(&cert_path, cert_pem.as_bytes(), 0o600).map_err(io(&cert_path))?;
                write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)
                    .map_err(io(&key_path))?;
                Ok(AgentCa {
                    issuer: Issuer::new(ca_params(), key),
                    cert_pem,
                    server_names: ServerNames::default(),
                })
            }
            Err(e) => Err(io(&key_path)(e)),
        }
    }

    /// A certificate (PEM) for an agent's listeners' `public_key` (an uncompressed P-256
    /// point), naming `ip` (where the server reaches the agent) and `host` (what it advertises
    /// to its peers, if anything): [`AgentCa::names_for`], then [`AgentCa::sign`].
    pub fn certify(
        &self,
        public_key: &[u8],
        ip: IpAddr,
        host: Option<&str>,
    ) -> Result<String, String> {
        let names = self.names_for(public_key, ip, host)?;
        self.sign(public_key, ip, names)
    }

    /// What a certificate for `public_key`, `ip` and `host` would name, or why none is signed
    /// (a key that is no P-256 point, a host that is another address, one of the server's
    /// names, or no name at all). Checks only: signing, which costs CPU and is bounded per
    /// caller, comes after every check ([`AgentCa::sign`]).
    pub fn names_for(
        &self,
        public_key: &[u8],
        ip: IpAddr,
        host: Option<&str>,
    ) -> Result<Names, String> {
        if public_key.len() != P256_POINT_BYTES || public_key.first() != Some(&4) {
            return Err(format!(
                "the public key must be an uncompressed ECDSA P-256 point ({P256_POINT_BYTES} \
                 bytes starting with 0x04), not {} bytes",
                public_key.len()
            ));
        }
        let mut names = vec![SanType::IpAddress(ip)];
        if let Some(h) = host.map(str::trim).filter(|h| !h.is_empty()) {
            self.server_names.check(h)?;
            if h.len() > 253 {
                return Err("the advertised host is longer than 253 bytes".into());
            }
            let dns_name = h.split('.').all(|label| {
                !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
            let name = match h.parse::<IpAddr>() {
                // Only the address the call came from is one the server has seen the agent at:
                // any other would let an agent-token holder pass for another agent.
                Ok(addr) if addr.to_canonical() != ip.to_canonical() => {
                    return Err(format!(
                        "advertised host `{h}` is not the address this call came from ({ip}): \
                         the server certifies only the address it sees an agent at; advertise \
                         that address or a DNS name, or give the agent --log-cert and --log-key \
                         from the operator's CA (the server's `[tls] agent_ca`)"
                    ));
                }
                Ok(addr) => SanType::IpAddress(addr),
                Err(_) if !dns_name => {
                    return Err(format!(
                        "advertised host `{h}`: neither an IP address nor a DNS name"
                    ));
                }
                Err(_) => SanType::DnsName(
                    h.try_into()
                        .map_err(|e| format!("advertised host `{h}`: {e}"))?,
                ),
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Ok(Names(names))
    }

    /// Signs `public_key`'s certificate for `names` ([`AgentCa::names_for`] of the same key
    /// and `ip`).
    pub fn sign(&self, public_key: &[u8], ip: IpAddr, names: Names) -> Result<String, String> {
        let Names(names) = names;
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("hetsched agent at {ip}"));
        p.distinguished_name = dn;
        p.subject_alt_names = names;
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::hours(1);
        p.not_after = now + time::Duration::days(AGENT_CERT_DAYS);
        p.signed_by(&AgentKey(public_key), &self.issuer)
            .map(|c| c.pem())
            .map_err(|e| e.to_string())
    }
}

/// The names a listener certificate will hold, checked ([`AgentCa::names_for`]).
#[derive(Debug)]
pub struct Names(Vec<SanType>);

/// Whether `host` (what an agent advertises, trimmed) is a DNS name rather than an IP address.
pub fn is_dns_name(host: &str) -> bool {
    let h = host.trim();
    !h.is_empty() && h.parse::<IpAddr>().is_err()
}

/// Resolves DNS name `host` on the server's host (its resolver: `/etc/hosts`, DNS) and refuses
/// it unless one of its addresses is `ip`, the address the agent's call came from: the server
/// vouches for a name only where it sees the agent (`localhost` resolves to the loopback
/// addresses). Blocking: call it off the async workers.
pub fn check_resolves_to(host: &str, ip: IpAddr) -> Result<(), String> {
    use std::net::ToSocketAddrs;
    let h = host.trim();
    let found: Vec<IpAddr> = match (h, 0u16).to_socket_addrs() {
        Ok(addrs) => addrs.map(|a| a.ip().to_canonical()).collect(),
        Err(e) => {
            return Err(format!(
                "advertised host `{h}` does not resolve on the server's host ({e}): the server \
                 certifies a name only if it resolves to the address this call came from \
                 ({ip}); advertise such a name or the address, or give the agent --log-cert and \
                 --log-key from the operator's CA (the server's `[tls] agent_ca`)"
            ));
        }
    };
    check_resolved(h, ip, &found)
}

/// [`check_resolves_to`] once `host` resolved to `found`.
pub fn check_resolved(host: &str, ip: IpAddr, found: &[IpAddr]) -> Result<(), String> {
    let ip = ip.to_canonical();
    if found.iter().any(|a| a.to_canonical() == ip) {
        return Ok(());
    }
    let mut shown: Vec<String> = found.iter().map(ToString::to_string).collect();
    shown.sort();
    shown.dedup();
    shown.truncate(8);
    Err(format!(
        "advertised host `{host}` resolves to {} on the server's host, not to the address this \
         call came from ({ip}): the server certifies a name only where it sees the agent; \
         advertise this agent's own name or address, or give the agent --log-cert and \
         --log-key from the operator's CA (the server's `[tls] agent_ca`)",
        if shown.is_empty() {
            "no address".to_string()
        } else {
            shown.join(", ")
        }
    ))
}

/// An agent's public key as rcgen signs it.
struct AgentKey<'a>(&'a [u8]);

impl PublicKeyData for AgentKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &PKCS_ECDSA_P256_SHA256
    }
}

/// Reads the CA's key, never through a symbolic link; a key this user owns that others may
/// read (kept from an earlier version, or restored with a wider mode) is made 0600 again.
fn read_private(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    crate::datadir::keep_private(&f, path, "the agents' CA key", true)?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

/// Writes a new file (`O_EXCL`: never through one someone put there) with `mode`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    #[test]
    fn the_ca_is_kept_private_and_certifies_a_key_for_the_agents_addresses() {
        let dir = ScratchDir::new("agent-ca", "names");
        let ca = AgentCa::open(&dir).expect("created");
        use std::os::unix::fs::PermissionsExt;
        // The certificate too (0644 before): the data directory's files are 0600.
        for f in [KEY_FILE, CERT_FILE] {
            let mode = std::fs::metadata(dir.join(f))
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}: {mode:o}");
        }
        let again = AgentCa::open(&dir).expect("kept");
        assert_eq!(again.cert_pem, ca.cert_pem, "the same CA after a restart");
        let agent = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("key");
        let ip: IpAddr = "10.1.2.3".parse().expect("ip");
        let pem = again
            .certify(agent.public_key_raw(), ip, Some("node7.example"))
            .expect("certified");
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        let e = ca.certify(&[1, 2, 3], ip, None).expect_err("not a key");
        assert!(e.contains("uncompressed ECDSA P-256 point"), "{e}");
        let e = ca
            .certify(agent.public_key_raw(), ip, Some("bad host!"))
            .expect_err("not a name");
        assert!(e.contains("advertised host `bad host!`"), "{e}");
    }

    /// The server vouches in a certificate only for the address it sees the agent at: an
    /// advertised IP address other than the one the request came from is refused, naming both
    /// (with one, any holder of the agent token got a certificate for another agent's address,
    /// and from a place on the network to intercept its traffic, read the task output and
    /// workflow data the server's and the consumers' tickets were sent for). The caller's own
    /// address, however written, is certified as before.
    #[test]
    fn an_advertised_ip_address_other_than_the_callers_is_not_certified() {
        let dir = ScratchDir::new("agent-ca", "ip");
        let ca = AgentCa::open(&dir).expect("created");
        let agent = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("key");
        let caller: IpAddr = "10.1.2.3".parse().expect("ip");
        let e = ca
            .certify(agent.public_key_raw(), caller, Some("10.9.9.9"))
            .expect_err("another agent's address");
        assert!(
            e.contains(
                "advertised host `10.9.9.9` is not the address this call came from (10.1.2.3)"
            ),
            "{e}"
        );
        for own in ["10.1.2.3", "::ffff:10.1.2.3"] {
            ca.certify(agent.public_key_raw(), caller, Some(own))
                .unwrap_or_else(|e| panic!("{own}: {e}"));
        }
    }

    /// A DNS name is certified only where it resolves to the caller's address (written as
    /// IPv4 or IPv4-mapped IPv6 alike); the refusal names what it resolves to.
    #[test]
    fn a_dns_name_must_resolve_to_the_callers_address() {
        let caller: IpAddr = "10.1.2.3".parse().expect("ip");
        let other: IpAddr = "10.9.9.9".parse().expect("ip");
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().expect("ip");
        check_resolved("n1.example", caller, &[other, mapped]).expect("one of them is the caller");
        let e = check_resolved("n1.example", caller, &[other]).expect_err("another host's");
        assert!(
            e.contains(
                "advertised host `n1.example` resolves to 10.9.9.9 on the server's host, \
                        not to the address this call came from (10.1.2.3)"
            ),
            "{e}"
        );
        let lo: IpAddr = "127.0.0.1".parse().expect("ip");
        check_resolves_to("localhost", lo).expect("localhost is the loopback address");
        assert!(is_dns_name("node7.example") && !is_dns_name("10.1.2.3") && !is_dns_name("::1"));
    }

    /// The server certifies no agent for its own names: its host name (and the name's first
    /// label, case aside) and the DNS names and IP addresses its `[tls]` certificate is valid
    /// for (the test certificate's: `localhost`, 127.0.0.1). Before, they were certified like
    /// any name, so an agent on the server's host could pass for the server. Other names are
    /// certified as before.
    #[test]
    fn the_servers_own_names_are_not_certified() {
        let dir = ScratchDir::new("agent-ca", "own");
        let mut ca = AgentCa::open(&dir).expect("created");
        let cert = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/tls/server.pem");
        ca.server_names = ServerNames::new("srv1.example.org", Some(&cert)).expect("names");
        let agent = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("key");
        let lo: IpAddr = "127.0.0.1".parse().expect("ip");
        for (host, why) in [
            ("srv1.example.org", "the server's host name"),
            ("SRV1", "the server's host name"),
            (
                "localhost",
                "a name the server's own TLS certificate is valid for",
            ),
            (
                "127.0.0.1",
                "a name the server's own TLS certificate is valid for",
            ),
        ] {
            let e = ca
                .certify(agent.public_key_raw(), lo, Some(host))
                .expect_err(host);
            assert!(
                e.contains(&format!("advertised host `{host}` is {why}")),
                "{e}"
            );
        }
        ca.certify(agent.public_key_raw(), lo, Some("node7.example"))
            .expect("an agent's own name");
        ca.certify(agent.public_key_raw(), lo, None)
            .expect("the caller's address alone");
        let e = ServerNames::new("", Some(&dir.join("none.pem")))
            .err()
            .expect("no such file");
        assert!(e.to_string().contains("none.pem"), "{e}");
    }

    /// A CA key kept from an earlier start open to others (an older version's, or restored
    /// from a backup with a wider mode) is made 0600 again when the server opens it.
    #[test]
    fn a_kept_ca_key_open_to_others_is_made_private_again() {
        use std::os::unix::fs::PermissionsExt;
        let dir = ScratchDir::new("agent-ca", "open");
        let ca = AgentCa::open(&dir).expect("created");
        let key = dir.join(KEY_FILE);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let again = AgentCa::open(&dir).expect("kept");
        assert_eq!(again.cert_pem, ca.cert_pem);
        let mode = std::fs::metadata(&key).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key is still {:o}", mode & 0o777);
    }
}
