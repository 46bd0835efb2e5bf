//! What etcd sees: a realistic sequence of coordination calls, every request
//! recorded, and only node ids, addresses, partition numbers and role names in it.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use oram_cluster::{
    Claim, ClusterError, FrontElection, Layout, Membership, MemoryRecorder, Ownership,
};
use support::EtcdCluster;

const NODES: [(&str, &str); 3] = [
    ("n1", "10.0.0.1:7001"),
    ("n2", "10.0.0.2:7001"),
    ("n3", "10.0.0.3:7001"),
];
const FRONTS: [&str; 2] = ["front-a", "front-b"];

/// Whether `key` is one of the layout's key shapes for cluster `rec`.
fn allowed_key(key: &[u8]) -> bool {
    let Ok(k) = std::str::from_utf8(key) else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    matches!(
        k,
        "/rec/front" | "/rec/nodes/" | "/rec/nodes0" | "/rec/owners/" | "/rec/owners0"
    ) || k
        .strip_prefix("/rec/nodes/")
        .is_some_and(|id| NODES.iter().any(|(n, _)| *n == id))
        || k.strip_prefix("/rec/owners/").is_some_and(digits)
}

fn allowed_value(v: &[u8]) -> bool {
    let Ok(v) = std::str::from_utf8(v) else {
        return false;
    };
    NODES.iter().any(|(n, a)| v == *n || v == *a) || FRONTS.contains(&v)
}

/// Every string in a request body: a key, range end or value (base64 of an allowed
/// one), a decimal number (revisions, lease ids, TTLs), or an enum word of etcd's.
fn check_json(field: &str, v: &serde_json::Value, path: &str) {
    use serde_json::Value;
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| check_json(k, v, path)),
        Value::Array(a) => a.iter().for_each(|v| check_json(field, v, path)),
        Value::String(s) => {
            let b64 = base64::engine::general_purpose::STANDARD;
            match field {
                "key" | "range_end" => {
                    assert!(allowed_key(&b64.decode(s).unwrap()), "{path}: key {s}")
                }
                "value" => assert!(allowed_value(&b64.decode(s).unwrap()), "{path}: value {s}"),
                "result" | "target" => {
                    assert!(
                        ["EQUAL", "MOD", "CREATE", "VERSION"].contains(&s.as_str()),
                        "{path}: {s}"
                    )
                }
                _ => assert!(
                    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()),
                    "{path}: {field}={s}"
                ),
            }
        }
        Value::Bool(_) | Value::Number(_) | Value::Null => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_sees_only_node_ids_addresses_partition_numbers_and_role_names() {
    let Some(etcd) = EtcdCluster::start(3).await else {
        return;
    };
    let recorder = Arc::new(MemoryRecorder::new());
    let client = etcd.client().with_recorder(recorder.clone());
    let layout = Layout::new("rec").unwrap();
    let m = Membership::new(client.clone(), layout.clone());
    let o = Ownership::new(client.clone(), layout.clone(), 8);
    let e = FrontElection::new(client.clone(), layout);

    // Nodes join, partitions are assigned, the front checks tokens, a stale claim
    // fails, a front is elected with a standby, a node leaves, partitions move.
    let mut regs = Vec::new();
    for (id, addr) in NODES {
        regs.push(m.register(id, addr, 2).await.unwrap());
    }
    let (_, rev) = m.live_nodes_at().await.unwrap();
    assert_eq!(o.rebalance(&m).await.unwrap().len(), 8);
    for owner in o.owners().await.unwrap().into_iter().flatten() {
        assert!(o.check_token(&owner.token).await.unwrap());
    }
    assert!(matches!(
        o.claim(3, "n1", 0).await.unwrap(),
        Claim::Conflict(Some(_))
    ));
    let front = e
        .campaign(FRONTS[0], 2, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert!(e
        .campaign(FRONTS[1], 2, Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    regs.pop().unwrap().deregister().await.unwrap();
    let seen = m
        .wait_for_change(rev, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!seen.events.is_empty());
    assert_eq!(o.rebalance(&m).await.unwrap().len(), 2);
    front.resign().await.unwrap();
    let standby = e
        .campaign(FRONTS[1], 2, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    standby.resign().await.unwrap();

    // Names that could carry an object name or block id are refused before
    // anything is sent.
    let before = recorder.requests().len();
    for bad in ["photos/cat.jpg", "block 17", "", "../x"] {
        let err = m.register(bad, "10.0.0.9:7001", 2).await.unwrap_err();
        assert!(matches!(err, ClusterError::InvalidName { .. }), "{err}");
    }
    assert!(m.register("n9", "bucket/object:1", 2).await.is_err());
    assert!(o.claim(1, "bucket/key", 0).await.is_err());
    assert_eq!(
        recorder.requests().len(),
        before,
        "a refused name reached etcd"
    );

    let requests = recorder.requests();
    let paths: BTreeSet<&str> = requests.iter().map(|r| r.path).collect();
    let expected = [
        "/v3/kv/deleterange",
        "/v3/kv/put",
        "/v3/kv/range",
        "/v3/kv/txn",
        "/v3/lease/grant",
        "/v3/lease/keepalive",
        "/v3/lease/revoke",
        "/v3/watch",
    ];
    assert!(paths.iter().all(|p| expected.contains(p)), "{paths:?}");
    for p in [
        "/v3/kv/put",
        "/v3/kv/range",
        "/v3/kv/txn",
        "/v3/lease/grant",
        "/v3/lease/revoke",
        "/v3/watch",
    ] {
        assert!(paths.contains(p), "the sequence exercises {p}");
    }
    for r in &requests {
        for k in &r.keys {
            assert!(
                allowed_key(k),
                "{}: key {:?}",
                r.path,
                String::from_utf8_lossy(k)
            );
        }
        for v in &r.values {
            assert!(
                allowed_value(v),
                "{}: value {:?}",
                r.path,
                String::from_utf8_lossy(v)
            );
        }
        let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        check_json("", &body, r.path);
    }
    drop(regs);
}
