//! Bucket policies: the subset of AWS's policy language this proxy reads, the
//! checks a document passes before it is stored ([`Policy::parse`]), and its
//! evaluation against a request ([`eval`]). Pure logic: no request, no object
//! layer; `crate::access` applies it to requests, `crate::bucketpolicy` serves
//! the four operations.
//!
//! **The subset** (docs/s3.md, "Bucket policies"):
//! - `Version` `2012-10-17` or `2008-10-17` (absent: `2008-10-17`, as AWS);
//!   `Id` is kept and ignored;
//! - `Statement`, one object or a non-empty list, each with an optional `Sid`
//!   (unique), `Effect` (`Allow`, `Deny`), `Principal`, `Action` or
//!   `NotAction`, `Resource` or `NotResource`, and an optional `Condition`;
//! - `Principal`: `"*"`, `{"AWS": "*"}`, or `{"AWS": …}` naming proxy users,
//!   each as `arn:aws:iam::<any account>:user/<user>` or the bare user name
//!   (a user is its S3 access key); `NotPrincipal` and other principal kinds
//!   are refused;
//! - actions: `s3:<Name>` with `*` and `?` wildcards (case-insensitive), or
//!   `*`; a pattern matching no action this proxy knows is refused;
//! - resources: `arn:aws:s3:::<bucket>` and `arn:aws:s3:::<bucket>/<key
//!   pattern>` (wildcards in the key pattern), of the policy's own bucket only;
//! - conditions ([`ConditionKey`], [`Operator`]): `Bool` on
//!   `aws:SecureTransport`; `IpAddress` / `NotIpAddress` on `aws:SourceIp`
//!   (IPv4 and IPv6 CIDR blocks or addresses); `StringEquals`,
//!   `StringNotEquals`, `StringLike`, `StringNotLike` on `s3:prefix`,
//!   `s3:x-amz-acl` and `aws:username`. Policy variables (`${…}`) are refused.

pub(crate) mod actions;
pub(crate) mod eval;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

use serde_json::{Map, Value};

/// The largest policy document accepted, in bytes (AWS's limit, 20 KiB).
pub(crate) const MAX_POLICY_BYTES: usize = 20 * 1024;

/// A checked bucket policy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Policy {
    pub(crate) statements: Vec<Statement>,
}

/// One statement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Statement {
    pub(crate) effect: Effect,
    pub(crate) principal: Principal,
    /// The action patterns, in lower case; `not`: `NotAction`.
    pub(crate) actions: Negatable<String>,
    /// The resource patterns (full ARNs); `not`: `NotResource`.
    pub(crate) resources: Negatable<String>,
    /// Every one must hold.
    pub(crate) conditions: Vec<Condition>,
}

/// `Allow` or `Deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    Allow,
    Deny,
}

/// Whom a statement is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// Everyone (`"*"`): here, every user of the proxy (anonymous requests are
    /// never served).
    Any,
    /// These users (access keys).
    Users(Vec<String>),
}

/// A list of patterns, or (`not`) everything but them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Negatable<T> {
    pub(crate) not: bool,
    pub(crate) items: Vec<T>,
}

/// A condition: an operator applied to one key and its values (any value may
/// match; a negated operator holds when none does).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Condition {
    pub(crate) op: Operator,
    pub(crate) key: ConditionKey,
    pub(crate) values: Vec<CondValue>,
}

/// The condition operators supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operator {
    Bool,
    IpAddress,
    NotIpAddress,
    StringEquals,
    StringNotEquals,
    StringLike,
    StringNotLike,
}

impl Operator {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "Bool" => Self::Bool,
            "IpAddress" => Self::IpAddress,
            "NotIpAddress" => Self::NotIpAddress,
            "StringEquals" => Self::StringEquals,
            "StringNotEquals" => Self::StringNotEquals,
            "StringLike" => Self::StringLike,
            "StringNotLike" => Self::StringNotLike,
            _ => return None,
        })
    }

    /// Whether it holds when none of its values matches.
    pub(crate) fn negated(self) -> bool {
        matches!(
            self,
            Self::NotIpAddress | Self::StringNotEquals | Self::StringNotLike
        )
    }
}

/// The condition keys supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConditionKey {
    /// `aws:SecureTransport`: the request came over the proxy's TLS listener.
    SecureTransport,
    /// `aws:SourceIp`: the peer address of the connection.
    SourceIp,
    /// `s3:prefix`: the `prefix` of a listing.
    Prefix,
    /// `s3:x-amz-acl`: the canned ACL a request sets.
    Acl,
    /// `aws:username`: the user making the request.
    Username,
}

impl ConditionKey {
    /// Keys are case-insensitive, as in AWS.
    fn parse(name: &str) -> Option<Self> {
        Some(match name.to_ascii_lowercase().as_str() {
            "aws:securetransport" => Self::SecureTransport,
            "aws:sourceip" => Self::SourceIp,
            "s3:prefix" => Self::Prefix,
            "s3:x-amz-acl" => Self::Acl,
            "aws:username" => Self::Username,
            _ => return None,
        })
    }

    /// The operators that apply to it.
    fn accepts(self, op: Operator) -> bool {
        match self {
            Self::SecureTransport => op == Operator::Bool,
            Self::SourceIp => matches!(op, Operator::IpAddress | Operator::NotIpAddress),
            Self::Prefix | Self::Acl | Self::Username => matches!(
                op,
                Operator::StringEquals
                    | Operator::StringNotEquals
                    | Operator::StringLike
                    | Operator::StringNotLike
            ),
        }
    }
}

/// A condition's value, parsed for its operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CondValue {
    Bool(bool),
    /// A network: its address (host bits cleared) and prefix length.
    Net(IpAddr, u8),
    Str(String),
}

/// Why a document is refused: the message of a `400 MalformedPolicy`.
pub(crate) type ParseError = String;

const S3_ARN: &str = "arn:aws:s3:::";

impl Policy {
    /// Checks `doc` as the policy of bucket `bucket` (see the module
    /// documentation for what is accepted); the error says what is wrong.
    pub(crate) fn parse(doc: &str, bucket: &str) -> Result<Policy, ParseError> {
        if doc.len() > MAX_POLICY_BYTES {
            return Err("Policies must be no more than 20 KB".into());
        }
        let v: Value =
            serde_json::from_str(doc).map_err(|e| format!("Policies must be valid JSON: {e}"))?;
        let Value::Object(top) = v else {
            return Err("Policies must be valid JSON and the first byte must be '{'".into());
        };
        for k in top.keys() {
            if !matches!(k.as_str(), "Version" | "Id" | "Statement") {
                return Err(format!("Unknown field {k}"));
            }
        }
        match top.get("Version") {
            None => {}
            Some(Value::String(v)) if v == "2012-10-17" || v == "2008-10-17" => {}
            Some(v) => {
                return Err(format!(
                    "The policy's Version {v} is not supported: use 2012-10-17 or 2008-10-17"
                ))
            }
        }
        if top.get("Id").is_some_and(|i| !i.is_string()) {
            return Err("Id must be a string".into());
        }
        let list = match top.get("Statement") {
            None => return Err("Missing required field Statement".into()),
            Some(Value::Array(l)) => l.iter().collect::<Vec<_>>(),
            Some(o @ Value::Object(_)) => vec![o],
            Some(_) => return Err("Statement must be an object or a list of objects".into()),
        };
        if list.is_empty() {
            return Err("Could not parse the policy: Statement is empty!".into());
        }
        let mut sids: Vec<&str> = Vec::new();
        let mut statements = Vec::with_capacity(list.len());
        for (i, s) in list.into_iter().enumerate() {
            let Value::Object(s) = s else {
                return Err(format!("Statement {} must be an object", i + 1));
            };
            if let Some(sid) = s.get("Sid") {
                let Some(sid) = sid.as_str() else {
                    return Err("Sid must be a string".into());
                };
                if sids.contains(&sid) {
                    return Err(format!(
                        "Statement IDs (SID) in a single policy must be unique: {sid}"
                    ));
                }
                sids.push(sid);
            }
            statements.push(statement(s, bucket).map_err(|e| match s.get("Sid") {
                Some(Value::String(sid)) => format!("{e} (statement {sid})"),
                _ => format!("{e} (statement {})", i + 1),
            })?);
        }
        Ok(Policy { statements })
    }
}

fn statement(s: &Map<String, Value>, bucket: &str) -> Result<Statement, ParseError> {
    for k in s.keys() {
        match k.as_str() {
            "Sid" | "Effect" | "Principal" | "Action" | "NotAction" | "Resource"
            | "NotResource" | "Condition" => {}
            "NotPrincipal" => return Err("NotPrincipal is not supported".into()),
            other => return Err(format!("Unknown field {other}")),
        }
    }
    let effect = match s.get("Effect").and_then(Value::as_str) {
        Some("Allow") => Effect::Allow,
        Some("Deny") => Effect::Deny,
        Some(other) => return Err(format!("Invalid effect: {other}")),
        None => return Err("Missing required field Effect".into()),
    };
    let principal = principal(s.get("Principal"))?;
    let actions = either(s, "Action", "NotAction")?;
    let actions = Negatable {
        not: actions.not,
        items: actions
            .items
            .into_iter()
            .map(|a| {
                let a = a.to_ascii_lowercase();
                if actions::is_known_pattern(&a) {
                    Ok(a)
                } else {
                    Err(format!("Policy has invalid action: {a}"))
                }
            })
            .collect::<Result<_, _>>()?,
    };
    let resources = either(s, "Resource", "NotResource")?;
    for r in &resources.items {
        check_resource(r, bucket)?;
    }
    let conditions = match s.get("Condition") {
        None => Vec::new(),
        Some(Value::Object(c)) => conditions(c)?,
        Some(_) => return Err("Condition must be an object".into()),
    };
    Ok(Statement {
        effect,
        principal,
        actions,
        resources,
        conditions,
    })
}

/// A string or a non-empty list of strings.
fn strings(v: &Value, what: &str) -> Result<Vec<String>, ParseError> {
    let list: Vec<&Value> = match v {
        Value::Array(l) => l.iter().collect(),
        other => vec![other],
    };
    if list.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    list.into_iter()
        .map(|x| match x {
            Value::String(s) => Ok(s.clone()),
            _ => Err(format!("{what} must be a string or a list of strings")),
        })
        .collect()
}

/// `Action` or `NotAction` (one of them, required).
fn either(
    s: &Map<String, Value>,
    field: &str,
    not_field: &str,
) -> Result<Negatable<String>, ParseError> {
    match (s.get(field), s.get(not_field)) {
        (Some(_), Some(_)) => Err(format!("{field} and {not_field} cannot both be given")),
        (None, None) => Err(format!("Missing required field {field}")),
        (Some(v), None) => Ok(Negatable {
            not: false,
            items: no_variables(strings(v, field)?)?,
        }),
        (None, Some(v)) => Ok(Negatable {
            not: true,
            items: no_variables(strings(v, not_field)?)?,
        }),
    }
}

fn no_variables(items: Vec<String>) -> Result<Vec<String>, ParseError> {
    match items.iter().find(|i| i.contains("${")) {
        Some(i) => Err(format!("Policy variables are not supported: {i}")),
        None => Ok(items),
    }
}

fn principal(v: Option<&Value>) -> Result<Principal, ParseError> {
    let aws = match v {
        None => return Err("Missing required field Principal".into()),
        Some(Value::String(s)) if s == "*" => return Ok(Principal::Any),
        Some(Value::Object(m)) => {
            if let Some(k) = m.keys().find(|k| k.as_str() != "AWS") {
                return Err(format!(
                    "Invalid principal in policy: {k} principals are not supported, only AWS"
                ));
            }
            match m.get("AWS") {
                Some(v) => strings(v, "Principal AWS")?,
                None => return Err("Invalid principal in policy: no AWS principal".into()),
            }
        }
        Some(_) => return Err("Invalid principal in policy".into()),
    };
    if aws.iter().any(|a| a == "*") {
        return Ok(Principal::Any);
    }
    aws.iter()
        .map(|a| user_of(a).ok_or_else(|| format!("Invalid principal in policy: {a}")))
        .collect::<Result<_, _>>()
        .map(Principal::Users)
}

/// The proxy user a principal names: `arn:aws:iam::<account>:user/<name>` or a
/// bare user name (no `:`, `/`, `*` or `?`).
fn user_of(a: &str) -> Option<String> {
    let name = match a.strip_prefix("arn:aws:iam::") {
        Some(rest) => rest.split_once(":user/")?.1,
        None => a,
    };
    let bad = |c: char| matches!(c, ':' | '/' | '*' | '?') || c.is_whitespace();
    (!name.is_empty() && !name.contains(bad)).then(|| name.to_string())
}

/// A resource must be the bucket or objects in it.
fn check_resource(r: &str, bucket: &str) -> Result<(), ParseError> {
    let in_bucket = r.strip_prefix(S3_ARN).is_some_and(|rest| {
        let name = rest.split_once('/').map_or(rest, |(b, _)| b);
        name == bucket
    });
    if in_bucket {
        Ok(())
    } else {
        Err(format!(
            "Policy has invalid resource: {r} is not arn:aws:s3:::{bucket} or arn:aws:s3:::{bucket}/<key pattern>"
        ))
    }
}

fn conditions(c: &Map<String, Value>) -> Result<Vec<Condition>, ParseError> {
    let mut out = Vec::new();
    for (op_name, block) in c {
        let op = Operator::parse(op_name)
            .ok_or_else(|| format!("Invalid Condition: the operator {op_name} is not supported"))?;
        let Value::Object(block) = block else {
            return Err(format!("Invalid Condition: {op_name} must be an object"));
        };
        for (key_name, values) in block {
            let key = ConditionKey::parse(key_name)
                .ok_or_else(|| format!("Invalid Condition: the key {key_name} is not supported"))?;
            if !key.accepts(op) {
                return Err(format!(
                    "Invalid Condition: {op_name} does not apply to {key_name}"
                ));
            }
            let values = cond_values(values).ok_or_else(|| {
                format!("Invalid Condition: the values of {key_name} must be strings")
            })?;
            if values.is_empty() {
                return Err(format!("Invalid Condition: {key_name} has no value"));
            }
            let values = values
                .iter()
                .map(|v| parse_value(op, v).ok_or_else(|| {
                    format!("Invalid Condition: {v:?} is not a valid value for {op_name} on {key_name}")
                }))
                .collect::<Result<_, _>>()?;
            out.push(Condition { op, key, values });
        }
    }
    Ok(out)
}

/// A condition's values as text: a string, boolean or number, or a list of them.
fn cond_values(v: &Value) -> Option<Vec<String>> {
    let one = |x: &Value| match x {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match v {
        Value::Array(l) => l.iter().map(one).collect(),
        x => one(x).map(|s| vec![s]),
    }
}

fn parse_value(op: Operator, v: &str) -> Option<CondValue> {
    match op {
        Operator::Bool => match v.to_ascii_lowercase().as_str() {
            "true" => Some(CondValue::Bool(true)),
            "false" => Some(CondValue::Bool(false)),
            _ => None,
        },
        Operator::IpAddress | Operator::NotIpAddress => {
            eval::parse_cidr(v).map(|(a, p)| CondValue::Net(a, p))
        }
        _ => (!v.contains("${")).then(|| CondValue::Str(v.to_string())),
    }
}
