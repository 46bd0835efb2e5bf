//! Evaluating a policy against one request, the AWS way: a matching `Deny`
//! wins over everything; otherwise a matching `Allow` allows; otherwise the
//! policy says nothing ([`Decision::Implicit`]) and the proxy's default
//! applies (the owner may, anyone else may not).
//!
//! A statement matches when its principal names the caller, an action pattern
//! matches the action (or, with `NotAction`, none does), a resource pattern
//! matches the resource (or, with `NotResource`, none does) and every
//! condition holds. A condition whose key the request lacks (`aws:SourceIp`
//! without a known peer, `s3:prefix` on a listing without one) holds only for
//! a negated operator, as in AWS.

use std::net::IpAddr;

use super::{CondValue, Condition, ConditionKey, Effect, Operator, Policy, Principal, Statement};

/// What a policy says about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// An explicit `Deny` matches.
    Deny,
    /// An `Allow` matches and no `Deny` does.
    Allow,
    /// No statement matches.
    Implicit,
}

/// A request, as a policy sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Request<'a> {
    /// The caller's user name (access key).
    pub(crate) user: &'a str,
    /// The action, `s3:<Name>` (any case).
    pub(crate) action: &'a str,
    /// The resource: `arn:aws:s3:::<bucket>` or `arn:aws:s3:::<bucket>/<key>`.
    pub(crate) resource: &'a str,
    /// Whether it came over TLS (`None`: unknown).
    pub(crate) secure: Option<bool>,
    /// The connection's peer address (`None`: unknown).
    pub(crate) source_ip: Option<IpAddr>,
    /// A listing's `prefix`.
    pub(crate) prefix: Option<&'a str>,
    /// The canned ACL (`x-amz-acl`) the request sets.
    pub(crate) acl: Option<&'a str>,
}

impl Policy {
    /// What the policy says about `req`. With `ignore_public_allows` (a bucket
    /// whose public access block restricts public buckets, asked by someone
    /// other than its owner), an `Allow` statement that is public
    /// ([`Statement::is_public`]) grants nothing.
    pub(crate) fn decide(&self, req: &Request<'_>, ignore_public_allows: bool) -> Decision {
        let mut allowed = false;
        for s in &self.statements {
            if !s.matches(req) {
                continue;
            }
            match s.effect {
                Effect::Deny => return Decision::Deny,
                Effect::Allow if ignore_public_allows && s.is_public() => {}
                Effect::Allow => allowed = true,
            }
        }
        if allowed {
            Decision::Allow
        } else {
            Decision::Implicit
        }
    }

    /// Whether the policy is public: some statement is.
    pub(crate) fn is_public(&self) -> bool {
        self.statements.iter().any(Statement::is_public)
    }
}

impl Statement {
    fn matches(&self, req: &Request<'_>) -> bool {
        let principal = match &self.principal {
            Principal::Any => true,
            Principal::Users(users) => users.iter().any(|u| u == req.user),
        };
        let action = req.action.to_ascii_lowercase();
        let action_hit = self.actions.items.iter().any(|p| glob(p, &action));
        let resource_hit = self.resources.items.iter().any(|p| glob(p, req.resource));
        principal
            && action_hit != self.actions.not
            && resource_hit != self.resources.not
            && self.conditions.iter().all(|c| c.holds(req))
    }

    /// Whether the statement is public: it allows everyone (`Principal` `*`)
    /// without an `IpAddress` condition on `aws:SourceIp` whose every block is
    /// at least a /8 (IPv4) or a /32 (IPv6).
    pub(crate) fn is_public(&self) -> bool {
        let restricted = self.conditions.iter().any(|c| {
            c.op == Operator::IpAddress
                && c.key == ConditionKey::SourceIp
                && c.values.iter().all(|v| match v {
                    CondValue::Net(IpAddr::V4(_), p) => *p >= 8,
                    CondValue::Net(IpAddr::V6(_), p) => *p >= 32,
                    _ => false,
                })
        });
        self.effect == Effect::Allow && self.principal == Principal::Any && !restricted
    }
}

impl Condition {
    fn holds(&self, req: &Request<'_>) -> bool {
        let any = match self.key {
            ConditionKey::SecureTransport => req.secure.map(|s| {
                self.values
                    .iter()
                    .any(|v| matches!(v, CondValue::Bool(b) if *b == s))
            }),
            ConditionKey::SourceIp => req.source_ip.map(|ip| {
                self.values
                    .iter()
                    .any(|v| matches!(v, CondValue::Net(net, p) if in_net(ip, *net, *p)))
            }),
            ConditionKey::Prefix => req.prefix.map(|s| self.any_string(s)),
            ConditionKey::Acl => req.acl.map(|s| self.any_string(s)),
            ConditionKey::Username => Some(self.any_string(req.user)),
        };
        match any {
            // A missing key: only a negated operator holds.
            None => self.op.negated(),
            Some(hit) => hit != self.op.negated(),
        }
    }

    fn any_string(&self, s: &str) -> bool {
        let like = matches!(self.op, Operator::StringLike | Operator::StringNotLike);
        self.values.iter().any(|v| match v {
            CondValue::Str(p) if like => glob(p, s),
            CondValue::Str(p) => p == s,
            _ => false,
        })
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters
/// (none included) and `?` any one character. Linear in the text for each
/// star tried: the classic greedy match that backtracks to the last star only.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    // The last star seen, and the text position it is matched up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            // Let the last star take one more character.
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// An address or a CIDR block (`10.0.0.0/8`, `2001:db8::/32`, `127.0.0.1`):
/// its network address (host bits cleared) and prefix length.
pub(crate) fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = addr.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) && l.len() <= 3 => {
            l.parse::<u8>().ok()?
        }
        Some(_) => return None,
        None => max,
    };
    (len <= max).then(|| (mask(addr, len), len))
}

/// `addr` with all but its first `len` bits cleared.
fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((bits & m).into())
        }
    }
}

/// Whether `ip` is in the block `net/len`. An IPv4 address mapped into IPv6
/// (a dual-stack listener's IPv4 peer) is read as the IPv4 address.
pub(crate) fn in_net(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    ip.is_ipv4() == net.is_ipv4() && mask(ip, len) == net
}
