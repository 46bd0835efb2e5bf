//! Container ACLs as Swift's tempauth reads them (`X-Container-Read`,
//! `X-Container-Write`), the caller's identity, and the account ACL header's
//! validation.
//!
//! An ACL is a comma-separated list of grants: `account` (every user of that
//! account), `account:user` (one user), and in read ACLs referrer grants
//! `.r:<host>` (`.r:*` any, `.r:.example.com` a domain, `.r:-host` a
//! denial) and `.rlistings` (referrer-granted readers may list too). The ACLs
//! live in the container's record in the local index (never at the storage
//! provider), and are evaluated there: no request to the back-end depends on
//! them.

use crate::error::{err, err_msg, Res, SwiftError};
use crate::limits::MAX_HEADER_SIZE;

/// The container attribute (`sysmeta`) holding the read ACL.
pub(crate) const READ: &str = "read";
/// The container attribute (`sysmeta`) holding the write ACL.
pub(crate) const WRITE: &str = "write";

/// The ACL updates of a container PUT or POST (`X-Container-Read`,
/// `X-Container-Write`, and `X-Remove-Container-*`), cleaned, as `sysmeta`
/// updates (an empty value removes the ACL).
pub(crate) fn acl_updates(
    ctx: &crate::plumbing::Ctx,
) -> Res<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for (key, write) in [(READ, false), (WRITE, true)] {
        if let Some(v) = ctx.header_utf8(&format!("x-container-{key}"))? {
            if v.len() > MAX_HEADER_SIZE {
                return Err(err_msg(
                    400,
                    format!("Header value too long: x-container-{key}"),
                ));
            }
            out.insert(key.to_string(), clean_acl(&v, write)?);
        }
        if ctx
            .headers
            .contains_key(format!("x-remove-container-{key}").as_str())
        {
            out.insert(key.to_string(), String::new());
        }
    }
    Ok(out)
}

/// Who sent a request: a valid token's account and user; `None` for a request
/// without token (anonymous: only `.r:` grants can admit it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The account the token belongs to.
    pub(crate) account: String,
    /// The user within the account.
    pub(crate) user: String,
    /// Whether the user administers its account (owns its containers).
    pub(crate) admin: bool,
}

impl Identity {
    /// Whether this identity owns account `acct` (may do anything in it,
    /// including setting ACLs).
    pub(crate) fn owns(&self, acct: &str) -> bool {
        self.admin && self.account == acct
    }

    /// Whether an ACL's group list names this identity: tempauth's groups of a
    /// user are `account`, `account:user`, and for an admin `AUTH_account`.
    fn in_groups(&self, groups: &[String]) -> bool {
        groups.iter().any(|g| {
            *g == self.account
                || (self.admin && g.strip_prefix("AUTH_") == Some(self.account.as_str()))
                || g.split_once(':')
                    .is_some_and(|(a, u)| a == self.account && u == self.user)
        })
    }
}

/// What a request does to a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// List the container (GET/HEAD of the container): the read ACL, and for
    /// referrer grants `.rlistings` too.
    List,
    /// Read an object (GET/HEAD): the read ACL.
    Read,
    /// Write or delete an object (PUT/POST/DELETE): the write ACL.
    Write,
}

/// The answer to a request the caller may not make: 401 without a token (the
/// client should authenticate), 403 with one.
pub(crate) fn denied(who: Option<&Identity>, realm: &str) -> SwiftError {
    match who {
        Some(_) => err(403),
        None => SwiftError {
            headers: vec![(
                http::header::WWW_AUTHENTICATE,
                format!("Swift realm=\"{realm}\""),
            )],
            ..err(401)
        },
    }
}

/// Whether `who` (with request header `Referer: referer`) may make an `access`
/// of a container of another account whose read and write ACLs are `read` and
/// `write` (cleaned form, as stored). tempauth's rule: a referrer grant admits
/// object reads (and listings with `.rlistings`); otherwise a group grant must
/// name the caller.
pub(crate) fn allowed(
    who: Option<&Identity>,
    referer: Option<&str>,
    access: Access,
    read: Option<&str>,
    write: Option<&str>,
) -> bool {
    let acl = match access {
        Access::List | Access::Read => read,
        Access::Write => write,
    };
    let (referrers, groups) = parse_acl(acl.unwrap_or(""));
    if referrer_allowed(referer, &referrers)
        && (access == Access::Read || groups.iter().any(|g| g == ".rlistings"))
    {
        return true;
    }
    who.is_some_and(|w| w.in_groups(&groups))
}

/// Splits a cleaned ACL into its referrer grants (after `.r:`) and its group
/// grants.
fn parse_acl(acl: &str) -> (Vec<String>, Vec<String>) {
    let (mut referrers, mut groups) = (Vec::new(), Vec::new());
    for v in acl.split(',').filter(|v| !v.is_empty()) {
        match v.strip_prefix(".r:") {
            Some(r) => referrers.push(r.to_string()),
            None => groups
                .push(String::from_utf8_lossy(&crate::util::percent_decode(v, false)).into_owned()),
        }
    }
    (referrers, groups)
}

/// Whether a request with header `Referer: referer` passes the referrer grants:
/// the last grant that matches the referrer's host decides (`*` matches any
/// host, `.example.com` a domain, a leading `-` denies).
fn referrer_allowed(referer: Option<&str>, grants: &[String]) -> bool {
    let host = referer
        .and_then(url_host)
        .unwrap_or_else(|| "unknown".into());
    let mut allow = false;
    for g in grants {
        let (deny, m) = match g.strip_prefix('-') {
            Some(m) => (true, m),
            None => (false, g.as_str()),
        };
        let hit = (m == "*" && !deny) || m == host || (m.starts_with('.') && host.ends_with(m));
        if hit {
            allow = !deny;
        }
    }
    allow
}

/// The host of an absolute URL (lower case, without user info and port).
fn url_host(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let auth = rest.split(['/', '?', '#']).next()?;
    let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        host.split(':').next()?
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Validates and normalises a container ACL header (`write`: the write ACL,
/// where referrer grants are refused), as Swift's `clean_acl`: empty entries
/// go, `.ref:`/`.referer:`/`.referrer:` become `.r:`, a `*` before a domain is
/// dropped. An unknown `.designator` or a referrer grant without host is 400.
pub(crate) fn clean_acl(value: &str, write: bool) -> Res<String> {
    let mut out: Vec<String> = Vec::new();
    for raw in value.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let Some((first, second)) = raw.split_once(':') else {
            out.push(raw.to_string());
            continue;
        };
        let (first, second) = (first.trim(), second.trim());
        if first.is_empty() || !first.starts_with('.') {
            out.push(raw.to_string());
        } else if matches!(first, ".r" | ".ref" | ".referer" | ".referrer") {
            if write {
                return Err(err_msg(
                    400,
                    format!("Referrers not allowed in write ACL: '{raw}'"),
                ));
            }
            let (neg, mut host) = match second.strip_prefix('-') {
                Some(h) => (true, h.trim()),
                None => (false, second),
            };
            if host != "*" && host.starts_with('*') {
                host = host[1..].trim();
            }
            if host.is_empty() || host == "." {
                return Err(err_msg(
                    400,
                    format!("No host/domain value after referrer designation in ACL: '{raw}'"),
                ));
            }
            out.push(format!(".r:{}{host}", if neg { "-" } else { "" }));
        } else {
            return Err(err_msg(
                400,
                format!("Unknown designator '{first}' in ACL: '{raw}'"),
            ));
        }
    }
    Ok(out.join(","))
}

/// Validates an `X-Account-Access-Control` value as tempauth does: JSON of an
/// object whose keys are among `admin`, `read-write`, `read-only`, each a list
/// of strings, at most [`MAX_HEADER_SIZE`] bytes. `Err` is the 400 answer.
pub(crate) fn check_account_acl(value: &[u8]) -> Res<serde_json::Map<String, serde_json::Value>> {
    let bad = |why: String| {
        let text = String::from_utf8_lossy(value);
        err_msg(
            400,
            format!("X-Account-Access-Control invalid: {why}\n\nInput: {text}\n"),
        )
    };
    if value.len() > MAX_HEADER_SIZE {
        return Err(err_msg(
            400,
            "Header value too long: x-account-access-control",
        ));
    }
    let text = std::str::from_utf8(value).map_err(|_| bad("not UTF-8".into()))?;
    if text.is_empty() {
        return Ok(serde_json::Map::new());
    }
    let parsed: serde_json::Value =
        serde_json::from_str(text).map_err(|_| bad(format!("Syntax error in input ({text:?})")))?;
    let serde_json::Value::Object(map) = parsed else {
        return Err(bad(format!("Syntax error in input ({text:?})")));
    };
    for (k, v) in &map {
        if !matches!(k.as_str(), "admin" | "read-write" | "read-only") {
            return Err(bad(format!("Key {k:?} not recognized")));
        }
        let serde_json::Value::Array(items) = v else {
            return Err(bad(format!("Value for key {k:?} must be a list")));
        };
        if !items.iter().all(serde_json::Value::is_string) {
            return Err(bad(format!("Elements of {k:?} list must be strings")));
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(account: &str, user: &str) -> Identity {
        Identity {
            account: account.into(),
            user: user.into(),
            admin: true,
        }
    }

    #[test]
    fn cleaning_follows_swift() {
        assert_eq!(
            clean_acl(
                " bob , .ref:*.example.com,, .rlistings,.referrer:-evil.org",
                false
            )
            .unwrap(),
            "bob,.r:.example.com,.rlistings,.r:-evil.org"
        );
        assert_eq!(clean_acl(".r:*", false).unwrap(), ".r:*");
        assert_eq!(clean_acl("", false).unwrap(), "");
        assert_eq!(clean_acl("bob:carol", true).unwrap(), "bob:carol");
        assert_eq!(clean_acl(".r:*", true).unwrap_err().status, 400);
        assert_eq!(clean_acl(".r:", false).unwrap_err().status, 400);
        assert_eq!(clean_acl(".bogus:x", false).unwrap_err().status, 400);
    }

    #[test]
    fn grants() {
        let bob = who("bob", "bob");
        let carol = who("bob", "carol");
        let read = Some("alice:alice,bob:bob");
        // A user grant admits that user only; an account grant every user.
        assert!(allowed(Some(&bob), None, Access::Read, read, None));
        assert!(allowed(Some(&bob), None, Access::List, read, None));
        assert!(!allowed(Some(&carol), None, Access::Read, read, None));
        assert!(allowed(Some(&carol), None, Access::Read, Some("bob"), None));
        // Read grants do not admit writes, nor write grants reads.
        assert!(!allowed(Some(&bob), None, Access::Write, read, None));
        assert!(!allowed(Some(&bob), None, Access::Read, None, Some("bob")));
        assert!(allowed(Some(&bob), None, Access::Write, None, Some("bob")));
        // Referrer grants admit anyone to objects; listings need .rlistings.
        assert!(allowed(None, None, Access::Read, Some(".r:*"), None));
        assert!(!allowed(None, None, Access::List, Some(".r:*"), None));
        assert!(allowed(
            None,
            None,
            Access::List,
            Some(".r:*,.rlistings"),
            None
        ));
        assert!(!allowed(None, None, Access::Write, Some(".r:*"), None));
        let dom = Some(".r:.example.com,.r:-bad.example.com");
        assert!(allowed(
            None,
            Some("http://www.example.com/x"),
            Access::Read,
            dom,
            None
        ));
        assert!(!allowed(
            None,
            Some("https://bad.example.com:8/"),
            Access::Read,
            dom,
            None
        ));
        assert!(!allowed(
            None,
            Some("http://example.org/"),
            Access::Read,
            dom,
            None
        ));
        assert!(!allowed(None, None, Access::Read, dom, None));
        assert!(!allowed(None, None, Access::Read, None, None));
    }

    #[test]
    fn account_acl_validation() {
        assert!(check_account_acl(br#"{"admin":["a:b"],"read-only":[]}"#).is_ok());
        assert!(check_account_acl(b"").unwrap().is_empty());
        for bad in [
            &b"invalid"[..],
            br#"["admin"]"#,
            br#"{"admin":"a"}"#,
            br#"{"admin":[1]}"#,
            br#"{"owner":["a"]}"#,
        ] {
            assert_eq!(check_account_acl(bad).unwrap_err().status, 400);
        }
        let long = format!(r#"{{"admin":["{}"]}}"#, "a".repeat(MAX_HEADER_SIZE));
        assert_eq!(check_account_acl(long.as_bytes()).unwrap_err().status, 400);
    }
}
