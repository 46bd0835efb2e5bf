//! The policy language: what parses and what is refused (with a message
//! saying why), wildcards, CIDR blocks, conditions, Deny precedence, public
//! policies, and the table of operations.

use std::net::IpAddr;

use super::actions::{self, Scope};
use super::eval::{glob, in_net, parse_cidr, Decision, Request};
use super::*;

const B: &str = "bkt";

fn parse(doc: &str) -> Result<Policy, String> {
    Policy::parse(doc, B)
}

fn one(statement: &str) -> Policy {
    parse(&format!(
        r#"{{"Version":"2012-10-17","Statement":{statement}}}"#
    ))
    .unwrap()
}

fn req<'a>(user: &'a str, action: &'a str, resource: &'a str) -> Request<'a> {
    Request {
        user,
        action,
        resource,
        ..Request::default()
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn refused_documents_say_why() {
    let cases: &[(&str, &str)] = &[
        ("not json", "valid JSON"),
        ("[1]", "first byte must be '{'"),
        (r#"{"Version":"2013-01-01","Statement":[]}"#, "Version"),
        (
            r#"{"Version":"2012-10-17"}"#,
            "Missing required field Statement",
        ),
        (r#"{"Statement":[]}"#, "Statement is empty"),
        (
            r#"{"Statement":[{"Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}]}"#,
            "Missing required field Effect",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Resource":"arn:aws:s3:::bkt/*"}]}"#,
            "Missing required field Action",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject"}]}"#,
            "Missing required field Resource",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}]}"#,
            "Missing required field Principal",
        ),
        (
            r#"{"Statement":[{"Effect":"Maybe","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}]}"#,
            "Invalid effect",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}]}"#,
            "invalid resource",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt2"}]}"#,
            "invalid resource",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"*"}]}"#,
            "invalid resource",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:Fly","Resource":"arn:aws:s3:::bkt"}]}"#,
            "invalid action: s3:fly",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"ec2:*","Resource":"arn:aws:s3:::bkt"}]}"#,
            "invalid action",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","NotPrincipal":{"AWS":"bob"},"Action":"s3:*","Resource":"arn:aws:s3:::bkt"}]}"#,
            "NotPrincipal is not supported",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":{"Service":"x"},"Action":"s3:*","Resource":"arn:aws:s3:::bkt"}]}"#,
            "Service principals",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:role/r"},"Action":"s3:*","Resource":"arn:aws:s3:::bkt"}]}"#,
            "Invalid principal",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt","Condition":{"DateGreaterThan":{"aws:CurrentTime":"2020-01-01"}}}]}"#,
            "operator DateGreaterThan",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt","Condition":{"StringEquals":{"aws:Referer":"x"}}}]}"#,
            "key aws:Referer",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/33"}}}]}"#,
            "not a valid value",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt","Condition":{"Bool":{"aws:SourceIp":"true"}}}]}"#,
            "does not apply",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt/${aws:username}/*"}]}"#,
            "Policy variables",
        ),
        (
            r#"{"Statement":[{"Sid":"a","Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt"},{"Sid":"a","Effect":"Deny","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt"}]}"#,
            "must be unique",
        ),
        (
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt","Extra":1}]}"#,
            "Unknown field Extra",
        ),
    ];
    for (doc, want) in cases {
        let e = parse(doc).unwrap_err();
        assert!(e.contains(want), "{doc}: {e:?} should say {want:?}");
    }
    let big = format!(
        r#"{{"Statement":[{{"Sid":"{}","Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt"}}]}}"#,
        "x".repeat(MAX_POLICY_BYTES)
    );
    assert!(parse(&big).unwrap_err().contains("20 KB"));
}

#[test]
fn accepted_forms() {
    // A single statement object, no Version (2008-10-17), principals in every form.
    let p = parse(
        r#"{"Id":"x","Statement":{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam::123456789012:user/bob","carol"]},"Action":["s3:Get*","S3:LISTBUCKET"],"Resource":["arn:aws:s3:::bkt","arn:aws:s3:::bkt/*"]}}"#,
    )
    .unwrap();
    assert_eq!(
        p.statements[0].principal,
        Principal::Users(vec!["bob".into(), "carol".into()])
    );
    assert_eq!(p.statements[0].actions.items, ["s3:get*", "s3:listbucket"]);
    assert_eq!(one(r#"{"Effect":"Deny","Principal":{"AWS":"*"},"Action":"*","Resource":"arn:aws:s3:::bkt"}"#).statements[0].principal, Principal::Any);
    assert!(parse(r#"{"Version":"2008-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"Bool":{"aws:SecureTransport":true}}}]}"#).is_ok());
}

#[test]
fn wildcards() {
    assert!(glob("a*c", "abbbc"));
    assert!(glob("a*c", "ac"));
    assert!(!glob("a*c", "acb"));
    assert!(glob("a?c", "abc"));
    assert!(!glob("a?c", "ac"));
    assert!(glob("*", ""));
    assert!(glob("*/*.txt", "x/y/z.txt"));
    assert!(!glob("*/*.txt", "x.txt"));
    assert!(glob("a*b*c", "aXbYbZc"));
    assert!(!glob("a*b*c", "aXcYb"));
    assert!(glob("pré?ix*", "préfix/é"));
    assert!(!glob("", "a"));
    // The greedy match backtracks to the last star only, and stays exact.
    assert!(glob("*a*a*a*b", &("a".repeat(50) + "b")));
    assert!(!glob("*a*a*a*b", &"a".repeat(50)));
}

#[test]
fn cidr_blocks() {
    assert_eq!(parse_cidr("10.1.2.3/8"), Some((ip("10.0.0.0"), 8)));
    assert_eq!(parse_cidr("127.0.0.1"), Some((ip("127.0.0.1"), 32)));
    assert_eq!(parse_cidr("2001:db8::1/32"), Some((ip("2001:db8::"), 32)));
    assert_eq!(parse_cidr("0.0.0.0/0"), Some((ip("0.0.0.0"), 0)));
    for bad in [
        "10.0.0.0/33",
        "::/129",
        "10.0.0.0/",
        "10.0.0/8",
        "x",
        "10.0.0.0/+8",
    ] {
        assert_eq!(parse_cidr(bad), None, "{bad}");
    }
    let (n, l) = parse_cidr("10.0.0.0/8").unwrap();
    assert!(in_net(ip("10.255.0.1"), n, l));
    assert!(!in_net(ip("11.0.0.1"), n, l));
    assert!(!in_net(ip("127.0.0.1"), n, l));
    // A v4 peer on a dual-stack socket is read as IPv4.
    assert!(in_net(ip("::ffff:10.0.0.1"), n, l));
    let (n, l) = parse_cidr("2001:db8::/32").unwrap();
    assert!(in_net(ip("2001:db8:ffff::1"), n, l));
    assert!(!in_net(ip("2001:db9::1"), n, l));
    assert!(!in_net(ip("10.0.0.1"), n, l));
    let (n, l) = parse_cidr("0.0.0.0/0").unwrap();
    assert!(in_net(ip("203.0.113.9"), n, l));
}

#[test]
fn deny_wins_and_actions_resources_principals_match() {
    let p = parse(
        r#"{"Version":"2012-10-17","Statement":[
        {"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/public/*"},
        {"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt/shared/*"},
        {"Effect":"Deny","Principal":"*","Action":"s3:DeleteObject","Resource":"arn:aws:s3:::bkt/*"},
        {"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::1:user/eve"},"NotAction":"s3:GetObject","Resource":"arn:aws:s3:::bkt/shared/*"}
    ]}"#,
    )
    .unwrap();
    let d = |user, action, res| p.decide(&req(user, action, res), false);
    assert_eq!(
        d("bob", "s3:GetObject", "arn:aws:s3:::bkt/public/a"),
        Decision::Allow
    );
    assert_eq!(
        d("carol", "s3:GetObject", "arn:aws:s3:::bkt/public/a"),
        Decision::Implicit
    );
    assert_eq!(
        d("bob", "s3:PutObject", "arn:aws:s3:::bkt/public/a"),
        Decision::Implicit
    );
    assert_eq!(
        d("bob", "s3:GetObject", "arn:aws:s3:::bkt/private/a"),
        Decision::Implicit
    );
    // The bucket is not an object in it.
    assert_eq!(
        d("bob", "s3:ListBucket", "arn:aws:s3:::bkt"),
        Decision::Implicit
    );
    assert_eq!(
        d("carol", "s3:PutObject", "arn:aws:s3:::bkt/shared/x"),
        Decision::Allow
    );
    // Deny beats the Allow of s3:*.
    assert_eq!(
        d("carol", "s3:DeleteObject", "arn:aws:s3:::bkt/shared/x"),
        Decision::Deny
    );
    // Action names are case-insensitive.
    assert_eq!(
        d("carol", "S3:deleteobject", "arn:aws:s3:::bkt/x"),
        Decision::Deny
    );
    // NotAction: eve may only read shared objects.
    assert_eq!(
        d("eve", "s3:PutObject", "arn:aws:s3:::bkt/shared/x"),
        Decision::Deny
    );
    assert_eq!(
        d("eve", "s3:GetObject", "arn:aws:s3:::bkt/shared/x"),
        Decision::Allow
    );
    // NotResource.
    let p = one(
        r#"{"Effect":"Deny","Principal":"*","Action":"s3:*","NotResource":"arn:aws:s3:::bkt/open/*"}"#,
    );
    assert_eq!(
        p.decide(&req("x", "s3:GetObject", "arn:aws:s3:::bkt/open/1"), false),
        Decision::Implicit
    );
    assert_eq!(
        p.decide(
            &req("x", "s3:GetObject", "arn:aws:s3:::bkt/closed/1"),
            false
        ),
        Decision::Deny
    );
}

#[test]
fn conditions_hold_as_in_aws() {
    let p = one(
        r#"[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","2001:db8::/32"]}}},
            {"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bkt/*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}]"#,
    );
    let at = |addr: Option<&str>, secure: Option<bool>| {
        let mut r = req("u", "s3:GetObject", "arn:aws:s3:::bkt/k");
        r.source_ip = addr.map(ip);
        r.secure = secure;
        p.decide(&r, false)
    };
    assert_eq!(at(Some("10.1.1.1"), Some(true)), Decision::Allow);
    assert_eq!(at(Some("2001:db8::5"), Some(true)), Decision::Allow);
    assert_eq!(at(Some("127.0.0.1"), Some(true)), Decision::Implicit);
    assert_eq!(at(Some("10.1.1.1"), Some(false)), Decision::Deny);
    // Keys the request lacks: IpAddress and Bool do not hold.
    assert_eq!(at(None, None), Decision::Implicit);

    let p = one(
        r#"{"Effect":"Deny","Principal":"*","Action":"s3:ListBucket","Resource":"arn:aws:s3:::bkt","Condition":{"StringNotLike":{"s3:prefix":["home/*","pub"]},"NotIpAddress":{"aws:SourceIp":"192.0.2.0/24"}}}"#,
    );
    let list = |prefix: Option<&str>, addr: &str| {
        let mut r = req("u", "s3:ListBucket", "arn:aws:s3:::bkt");
        r.prefix = prefix;
        r.source_ip = Some(ip(addr));
        p.decide(&r, false)
    };
    assert_eq!(list(Some("home/a/"), "127.0.0.1"), Decision::Implicit);
    assert_eq!(list(Some("pub"), "127.0.0.1"), Decision::Implicit);
    assert_eq!(list(Some("secret/"), "127.0.0.1"), Decision::Deny);
    // A missing key: a negated operator holds.
    assert_eq!(list(None, "127.0.0.1"), Decision::Deny);
    // Both conditions must hold.
    assert_eq!(list(Some("secret/"), "192.0.2.7"), Decision::Implicit);

    let p = one(
        r#"{"Effect":"Allow","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"StringEquals":{"s3:x-amz-acl":"private","aws:username":["bob"]}}}"#,
    );
    let put = |user, acl| {
        let mut r = req(user, "s3:PutObject", "arn:aws:s3:::bkt/k");
        r.acl = acl;
        p.decide(&r, false)
    };
    assert_eq!(put("bob", Some("private")), Decision::Allow);
    assert_eq!(put("bob", None), Decision::Implicit);
    assert_eq!(put("carol", Some("private")), Decision::Implicit);
}

#[test]
fn public_policies() {
    let public = [
        r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}"#,
        r#"{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"IpAddress":{"aws:SourceIp":"0.0.0.0/1"}}}"#,
        r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"NotIpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}"#,
        r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","::/0"]}}}"#,
    ];
    for s in public {
        assert!(one(s).is_public(), "{s}");
    }
    let private = [
        r#"{"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}"#,
        r#"{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"}"#,
        r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*","Condition":{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","2001:db8::/32"]}}}"#,
    ];
    for s in private {
        assert!(!one(s).is_public(), "{s}");
    }
    // Restricted, a public Allow grants nothing; a Deny still denies.
    let p = one(
        r#"[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bkt/*"},
            {"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:PutObject","Resource":"arn:aws:s3:::bkt/*"},
            {"Effect":"Deny","Principal":"*","Action":"s3:DeleteObject","Resource":"arn:aws:s3:::bkt/*"}]"#,
    );
    let r = |a| req("bob", a, "arn:aws:s3:::bkt/k");
    assert_eq!(p.decide(&r("s3:GetObject"), false), Decision::Allow);
    assert_eq!(p.decide(&r("s3:GetObject"), true), Decision::Implicit);
    assert_eq!(p.decide(&r("s3:PutObject"), true), Decision::Allow);
    assert_eq!(p.decide(&r("s3:DeleteObject"), true), Decision::Deny);
}

#[test]
fn the_operation_table() {
    assert_eq!(
        actions::of("GetObject", false),
        Some(("s3:GetObject", Scope::Object))
    );
    assert_eq!(
        actions::of("HeadObject", true),
        Some(("s3:GetObjectVersion", Scope::Object))
    );
    assert_eq!(
        actions::of("DeleteObject", true),
        Some(("s3:DeleteObjectVersion", Scope::Object))
    );
    assert_eq!(
        actions::of("ListObjectsV2", false),
        Some(("s3:ListBucket", Scope::Bucket))
    );
    assert_eq!(
        actions::of("PutBucketPolicy", false),
        Some(("s3:PutBucketPolicy", Scope::OwnerOnly))
    );
    assert_eq!(actions::of("ListBuckets", false), None);
    assert_eq!(actions::of("DeleteObjects", false), None);
    assert!(actions::is_known_pattern("s3:get*"));
    assert!(actions::is_known_pattern("s3:bypassgovernanceretention"));
    assert!(actions::is_known_pattern("*"));
    assert!(!actions::is_known_pattern("s3:getobjectz"));
    assert!(!actions::is_known_pattern("iam:*"));
}
