//! CORS as Swift does it (strict mode): a container allows origins with its
//! `X-Container-Meta-Access-Control-Allow-Origin` (origins separated by
//! spaces, or `*`), and may set `-Expose-Headers` and `-Max-Age`.
//!
//! - `OPTIONS` needs no token. Without `Origin` it answers `200` with
//!   `Allow`. With one, on a container or object, it is a preflight: `401`
//!   unless the container allows the origin and `Access-Control-Request-Method`
//!   is a method of the resource; else `200` with
//!   `Access-Control-Allow-Origin`, `-Allow-Methods`, `-Allow-Headers` (the
//!   headers asked for), `-Max-Age` and `Vary`.
//! - Any other request with `Origin` to a container or object of a container
//!   that allows that origin gets `Access-Control-Allow-Origin` and
//!   `Access-Control-Expose-Headers` on its answer (errors included).
//!
//! The container's settings are read from the local index only.

use http::{HeaderName, HeaderValue, Method};

use crate::plumbing::{Answer, Ctx};
use crate::SwiftApi;

/// The methods of an object.
const OBJECT_METHODS: &str = "COPY, DELETE, GET, HEAD, OPTIONS, POST, PUT";
/// The methods of a container.
const CONTAINER_METHODS: &str = "DELETE, GET, HEAD, OPTIONS, POST, PUT";
/// The methods of an account.
const ACCOUNT_METHODS: &str = "DELETE, GET, HEAD, OPTIONS, POST";

/// The headers every CORS answer exposes (Swift's list).
const EXPOSED: [&str; 10] = [
    "cache-control",
    "content-language",
    "content-type",
    "expires",
    "last-modified",
    "pragma",
    "etag",
    "x-timestamp",
    "x-trans-id",
    "x-openstack-request-id",
];

/// A container's CORS settings (its `access-control-*` metadata).
struct Rules {
    allow_origin: String,
    expose_headers: String,
    max_age: Option<String>,
}

impl Rules {
    /// Whether `origin` is allowed.
    fn allows(&self, origin: &str) -> bool {
        self.allow_origin
            .split_whitespace()
            .any(|o| o == origin || o == "*")
    }

    /// The `Access-Control-Allow-Origin` answered to `origin`.
    fn allow_origin_for<'a>(&self, origin: &'a str) -> &'a str {
        if self.allow_origin.trim() == "*" {
            "*"
        } else {
            origin
        }
    }
}

impl SwiftApi {
    /// The CORS settings of container `c` of account `acct` (`None`: no such
    /// container).
    fn cors_rules(&self, acct: &str, c: &str) -> Option<Rules> {
        let b = self.inner.layer.head_bucket(acct, c).ok()?;
        let get = |k: &str| b.meta.get(k).cloned();
        Some(Rules {
            allow_origin: get("access-control-allow-origin").unwrap_or_default(),
            expose_headers: get("access-control-expose-headers").unwrap_or_default(),
            max_age: get("access-control-max-age"),
        })
    }

    /// Answers an `OPTIONS` request on `acct` / `container` / `object` (see
    /// the module documentation).
    pub(crate) fn options(
        &self,
        ctx: &Ctx,
        acct: &str,
        container: Option<&str>,
        object: Option<&str>,
    ) -> Answer {
        let methods = match (container, object) {
            (None, _) => ACCOUNT_METHODS,
            (Some(_), None) => CONTAINER_METHODS,
            (Some(_), Some(_)) => OBJECT_METHODS,
        };
        let mut a = Answer::new(200).header("allow", methods);
        let (Some(origin), Some(c)) = (ctx.header("origin"), container) else {
            return a;
        };
        let asked = ctx.header("access-control-request-method").unwrap_or("");
        let rules = self.cors_rules(acct, c);
        let allowed = rules.as_ref().is_some_and(|r| r.allows(origin))
            && methods.split(", ").any(|m| m == asked);
        let Some(rules) = rules.filter(|_| allowed) else {
            a.status = http::StatusCode::UNAUTHORIZED;
            return a;
        };
        a = a
            .header(
                "access-control-allow-origin",
                rules.allow_origin_for(origin),
            )
            .header("access-control-allow-methods", methods);
        let mut vary = "Origin".to_string();
        if let Some(age) = &rules.max_age {
            a = a.header("access-control-max-age", age);
        }
        if let Some(h) = ctx
            .header("access-control-request-headers")
            .filter(|h| !h.trim().is_empty())
        {
            a = a.header("access-control-allow-headers", h);
            vary.push_str(", Access-Control-Request-Headers");
        }
        a.header("vary", vary)
    }

    /// The CORS headers of the answer to a request carrying `Origin` to
    /// container `c` of `acct`, whose answer has headers named `names`; none
    /// unless the container allows the origin.
    pub(crate) fn cors_headers<'a>(
        &self,
        ctx: &Ctx,
        (acct, c): (&str, &str),
        names: impl Iterator<Item = &'a HeaderName>,
    ) -> Vec<(HeaderName, HeaderValue)> {
        if ctx.method == Method::OPTIONS {
            return Vec::new();
        }
        let Some(origin) = ctx.header("origin") else {
            return Vec::new();
        };
        let Some(rules) = self.cors_rules(acct, c).filter(|r| r.allows(origin)) else {
            return Vec::new();
        };
        let mut expose: Vec<String> = EXPOSED.iter().map(|s| s.to_string()).collect();
        for n in names {
            let n = n.as_str();
            if (n.starts_with("x-container-meta-") || n.starts_with("x-object-meta-"))
                && !expose.iter().any(|e| e == n)
            {
                expose.push(n.to_string());
            }
        }
        for h in rules.expose_headers.split_whitespace() {
            if !expose.iter().any(|e| e.eq_ignore_ascii_case(h)) {
                expose.push(h.to_string());
            }
        }
        let mut out = Vec::new();
        let mut add = |n: &'static str, v: &str| {
            if let Ok(v) = HeaderValue::from_str(v) {
                out.push((HeaderName::from_static(n), v));
            }
        };
        add("access-control-expose-headers", &expose.join(", "));
        let allow = rules.allow_origin_for(origin);
        add("access-control-allow-origin", allow);
        if allow != "*" {
            add("vary", "Origin");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_matched_exactly_or_by_star() {
        let r = Rules {
            allow_origin: "http://a.com  http://b.com".into(),
            expose_headers: String::new(),
            max_age: None,
        };
        assert!(r.allows("http://b.com"));
        assert!(!r.allows("http://c.com"));
        assert!(!r.allows("http://a.co"));
        assert_eq!(r.allow_origin_for("http://a.com"), "http://a.com");
        let star = Rules {
            allow_origin: "*".into(),
            ..r
        };
        assert!(star.allows("http://c.com"));
        assert_eq!(star.allow_origin_for("http://c.com"), "*");
    }
}
