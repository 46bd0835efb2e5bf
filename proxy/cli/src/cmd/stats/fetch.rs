//! Blocking HTTP/1.1 requests to the operator endpoint — `GET /metrics` for
//! `stats`, `/users` for `user` — over TLS with rustls when the URL is
//! `https://`, bounded by timeouts: no HTTP client library for one request.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Why the endpoint could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Nothing listens there (the proxy is not running).
    #[error("nothing listens at {0}")]
    Refused(String),
    /// The endpoint has no such path (a proxy of an earlier version).
    #[error("{0} was not found")]
    NotFound(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// Where and how to reach a running proxy's operator endpoint.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port` or `https://host:port`.
    pub url: String,
    /// The bearer token, if one is needed.
    pub token_file: Option<PathBuf>,
    /// CA certificates to verify an HTTPS endpoint with.
    pub ca_file: Option<PathBuf>,
}

/// GETs `<url>/metrics` (blocking; bounded by timeouts).
pub fn fetch_metrics(t: &Target) -> Result<String, FetchError> {
    fetch(t, "/metrics")
}

/// GETs `<url><path>` (blocking; bounded by timeouts); a 404 is
/// [`FetchError::NotFound`].
pub fn fetch(t: &Target, path: &str) -> Result<String, FetchError> {
    match call(t, "GET", path, None)? {
        (200, body) => Ok(body),
        (404, _) => Err(FetchError::NotFound(format!("{}{path}", t.url))),
        (s, _) => Err(FetchError::Other(format!("{}{path} answered {s}", t.url))),
    }
}

/// Sends `method path` with the token and a JSON `body` (blocking; bounded by
/// timeouts); returns the status and the body. A 401 is an error saying which
/// token to pass.
pub fn call(
    t: &Target,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), FetchError> {
    let other = |e: String| FetchError::Other(e);
    let (https, rest) = if let Some(r) = t.url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = t.url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(other(format!("{}: expected http:// or https://", t.url)));
    };
    let hostport = rest.trim_end_matches('/');
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (
            h.trim_start_matches('[').trim_end_matches(']'),
            p.parse::<u16>()
                .map_err(|_| other(format!("{}: bad port", t.url)))?,
        ),
        None => (hostport, if https { 443 } else { 80 }),
    };
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| other(format!("{host}: {e}")))?
        .collect();
    let mut last = None;
    let mut sock = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, Duration::from_secs(5)) {
            Ok(s) => {
                sock = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let sock = match sock {
        Some(s) => s,
        None => {
            return Err(match last {
                Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    FetchError::Refused(t.url.clone())
                }
                Some(e) => other(format!("{}: {e}", t.url)),
                None => other(format!("{host}: no address")),
            })
        }
    };
    let _ = sock.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = sock.set_write_timeout(Some(Duration::from_secs(30)));
    let token = match &t.token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| other(format!("{}: {e}", p.display())))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let mut req = zeroize::Zeroizing::new(format!(
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\nUser-Agent: oram-proxy-cli\r\n"
    ));
    if let Some(tok) = &token {
        req.push_str(&format!("Authorization: Bearer {tok}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ));
    } else {
        req.push_str("\r\n");
    }
    let mut raw = zeroize::Zeroizing::new(Vec::new());
    if https {
        let mut roots = rustls::RootCertStore::empty();
        let ca = t.ca_file.as_ref().ok_or_else(|| {
            other(format!(
                "{} speaks HTTPS: pass the CA certificate with --ca-file",
                t.url
            ))
        })?;
        use rustls::pki_types::pem::PemObject;
        for c in rustls::pki_types::CertificateDer::pem_file_iter(ca)
            .map_err(|e| other(format!("{}: {e}", ca.display())))?
        {
            roots
                .add(c.map_err(|e| other(format!("{}: {e}", ca.display())))?)
                .map_err(|e| other(format!("{}: {e}", ca.display())))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cc = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| other(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| other(format!("{host}: {e}")))?;
        let conn = rustls::ClientConnection::new(std::sync::Arc::new(cc), name)
            .map_err(|e| other(e.to_string()))?;
        let mut s = rustls::StreamOwned::new(conn, sock);
        s.write_all(req.as_bytes())
            .map_err(|e| other(format!("{}: {e}", t.url)))?;
        match s.read_to_end(&mut raw) {
            Ok(_) => {}
            // A server that closes without close_notify still sent everything.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(other(format!("{}: {e}", t.url))),
        }
    } else {
        let mut s = sock;
        s.write_all(req.as_bytes())
            .map_err(|e| other(format!("{}: {e}", t.url)))?;
        s.read_to_end(&mut raw)
            .map_err(|e| other(format!("{}: {e}", t.url)))?;
    }
    let (status, body) =
        parse_response(&raw).ok_or_else(|| other("malformed HTTP answer".into()))?;
    match status {
        401 => Err(other(format!(
            "{}{path} wants the endpoint's token: pass --token-file (the generated one is \
             <data_dir>/metrics.token)",
            t.url
        ))),
        s => Ok((s, body)),
    }
}

/// The status and body (de-chunked) of an HTTP/1.1 answer.
fn parse_response(raw: &[u8]) -> Option<(u16, String)> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let body = &raw[split + 4..];
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n")?;
            let size_text = std::str::from_utf8(&rest[..eol]).ok()?;
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            rest = &rest[eol + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(rest.get(..size)?);
            rest = rest.get(size + 2..)?;
        }
        out
    } else {
        body.to_vec()
    };
    Some((status, String::from_utf8(body).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_answers_parse_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(parse_response(plain), Some((200, "hello".into())));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked), Some((200, "hello".into())));
        assert_eq!(
            parse_response(b"HTTP/1.1 401 No\r\n\r\n"),
            Some((401, String::new()))
        );
        assert_eq!(parse_response(b"garbage"), None);
    }
}
