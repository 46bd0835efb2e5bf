//! Virtual-hosted–style addressing: with a configured domain (`[s3] domain`),
//! a request whose `Host` is `<bucket>.<domain>` (any port) addresses that
//! bucket, and its path is the key. Every other host — the domain itself, an IP
//! address, `localhost` or any other name — is path-style, so clients that
//! address the proxy by its IP address or another name keep working. (s3s's
//! own `SingleDomain` would take any other host name, port included, as a
//! bucket name.)

use s3s::host::{S3Host, VirtualHost};
use s3s::S3Result;

/// Why `domain` cannot be the domain of virtual-hosted–style addressing, or
/// `None` when it can: DNS labels of `a-z`, `0-9` and `-` (1 to 63 each, not
/// starting or ending with `-`) separated by dots, at most 253 bytes, at least
/// two labels, no port and not an IP address.
pub fn domain_problem(domain: &str) -> Option<&'static str> {
    if domain.is_empty() || domain.len() > 253 {
        return Some("must be 1 to 253 bytes");
    }
    if domain.parse::<std::net::IpAddr>().is_ok() {
        return Some("is an IP address; virtual-hosted addressing needs a domain name");
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2 {
        return Some("needs at least two labels (such as s3.example.com)");
    }
    for l in labels {
        if l.is_empty() || l.len() > 63 {
            return Some("has an empty label or one longer than 63 bytes");
        }
        if !l
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Some("may hold only a-z, 0-9, '-' and '.' (no port)");
        }
        if l.starts_with('-') || l.ends_with('-') {
            return Some("has a label starting or ending with '-'");
        }
    }
    None
}

/// The bucket a `Host` header names under `domain` (virtual-hosted–style
/// addressing, as the S3 service reads it), if any: for the per-operation
/// metrics, which classify requests by their path.
pub fn virtual_host_bucket(host: &str, domain: &str) -> Option<String> {
    if domain.is_empty() {
        return None;
    }
    VirtualHosts::new(domain).bucket_of(host)
}

/// The host parser for a configured domain (see the module documentation).
pub(crate) struct VirtualHosts {
    /// The domain, lower case, without a port.
    domain: String,
}

impl VirtualHosts {
    pub(crate) fn new(domain: &str) -> Self {
        Self {
            domain: domain.to_ascii_lowercase(),
        }
    }

    /// The bucket a `Host` header names, if it is `<bucket>.<domain>`.
    fn bucket_of(&self, host: &str) -> Option<String> {
        // The port, if any, does not matter (IPv6 literals never get here:
        // s3s reads them path-style).
        let name = host.rsplit_once(':').map_or(host, |(n, _)| n);
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let bucket = name.strip_suffix(&self.domain)?.strip_suffix('.')?;
        (!bucket.is_empty()).then(|| bucket.to_string())
    }
}

impl S3Host for VirtualHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        Ok(match self.bucket_of(host) {
            Some(bucket) => VirtualHost::new(self.domain.as_str()).with_bucket(bucket),
            None => VirtualHost::new(host),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_subdomains_of_the_domain_name_a_bucket() {
        let v = VirtualHosts::new("s3.example.test");
        let bucket = |h: &str| v.parse_host_header(h).unwrap().bucket().map(str::to_string);
        assert_eq!(bucket("bkt.s3.example.test"), Some("bkt".into()));
        assert_eq!(bucket("bkt.s3.example.test:8480"), Some("bkt".into()));
        assert_eq!(bucket("My.Bkt.S3.Example.Test"), Some("my.bkt".into()));
        assert_eq!(bucket("bkt.s3.example.test."), Some("bkt".into()));
        assert_eq!(bucket("s3.example.test"), None);
        assert_eq!(bucket("s3.example.test:8480"), None);
        assert_eq!(bucket(".s3.example.test"), None);
        assert_eq!(bucket("localhost:8480"), None);
        assert_eq!(bucket("proxy.internal"), None);
        assert_eq!(bucket("xs3.example.test"), None);
    }

    #[test]
    fn domains_are_checked() {
        assert_eq!(domain_problem("s3.example.test"), None);
        assert_eq!(domain_problem("localhost.localdomain"), None);
        for bad in [
            "",
            "localhost",
            "s3.example.test:80",
            "127.0.0.1",
            "S3.example.test",
            "a..b",
            "-a.b",
            "a_b.c",
        ] {
            assert!(domain_problem(bad).is_some(), "{bad}");
        }
    }
}
