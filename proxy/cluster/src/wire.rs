//! The etcd v3 messages this crate sends and reads, in the JSON the gRPC gateway
//! speaks (field names as etcd 3.4's gateway writes them: `int64` fields as
//! strings and omitted when zero, `bytes` fields as base64, empty lists omitted).
//!
//! These types are what etcd sees: a [`Recorder`](crate::Recorder) is handed their
//! keys and values before they are sent.

use serde::{Deserialize, Serialize};

use crate::codec::{b64, int64, is_empty, is_zero};

/// The header of every answer: the store's revision when the request was served.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ResponseHeader {
    /// The key-value store's revision when the request was served (after it, for a
    /// write).
    #[serde(default, with = "int64")]
    pub revision: i64,
}

/// A key and its value with etcd's revisions.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    #[serde(default, with = "b64")]
    pub key: Vec<u8>,
    /// The value.
    #[serde(default, with = "b64")]
    pub value: Vec<u8>,
    /// The revision of the key's creation (since its last deletion).
    #[serde(default, with = "int64")]
    pub create_revision: i64,
    /// The revision of the key's last modification: an owner key's fencing token.
    #[serde(default, with = "int64")]
    pub mod_revision: i64,
    /// How many times the key was written since its creation.
    #[serde(default, with = "int64")]
    pub version: i64,
    /// The lease the key is attached to (0: none).
    #[serde(default, with = "int64")]
    pub lease: i64,
}

/// `/v3/kv/range`: one key, or the keys in `[key, range_end)`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RangeRequest {
    /// The key, or the first key of the range.
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    /// The end of the range (exclusive); empty: only `key`.
    #[serde(with = "b64", skip_serializing_if = "is_empty")]
    pub range_end: Vec<u8>,
}

/// The answer to a range.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RangeResponse {
    /// The header.
    #[serde(default)]
    pub header: ResponseHeader,
    /// The keys found, in key order.
    #[serde(default)]
    pub kvs: Vec<KeyValue>,
}

/// `/v3/kv/put`: write a value, optionally attached to a lease.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PutRequest {
    /// The key.
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    /// The value.
    #[serde(with = "b64")]
    pub value: Vec<u8>,
    /// The lease to attach the key to (0: none): the key is deleted when it lapses.
    #[serde(with = "int64", skip_serializing_if = "is_zero")]
    pub lease: i64,
}

/// The answer to a put.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PutResponse {
    /// The header: its revision is the key's new mod_revision.
    #[serde(default)]
    pub header: ResponseHeader,
}

/// `/v3/kv/deleterange`: delete one key or the keys in `[key, range_end)`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeleteRangeRequest {
    /// The key, or the first key of the range.
    #[serde(with = "b64")]
    pub key: Vec<u8>,
    /// The end of the range (exclusive); empty: only `key`.
    #[serde(with = "b64", skip_serializing_if = "is_empty")]
    pub range_end: Vec<u8>,
}

/// The answer to a delete.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct DeleteRangeResponse {
    /// The header.
    #[serde(default)]
    pub header: ResponseHeader,
    /// How many keys were deleted.
    #[serde(default, with = "int64")]
    pub deleted: i64,
}

/// What a [`Compare`] tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    /// The key's version (0: absent).
    Version(i64),
    /// The key's create_revision (0: absent).
    CreateRevision(i64),
    /// The key's mod_revision (0: absent).
    ModRevision(i64),
    /// The key's value.
    Value(Vec<u8>),
}

/// How a [`Compare`] tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CompareResult {
    /// The key's field equals the given one.
    Equal,
    /// The key's field is greater.
    Greater,
    /// The key's field is less.
    Less,
    /// The key's field differs.
    NotEqual,
}

/// One condition of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    /// The key tested.
    pub key: Vec<u8>,
    /// How.
    pub result: CompareResult,
    /// Against what.
    pub target: CompareTarget,
}

impl Compare {
    /// `key`'s mod_revision equals `revision` (0: the key is absent).
    pub fn mod_revision(key: impl Into<Vec<u8>>, revision: i64) -> Self {
        let target = CompareTarget::ModRevision(revision);
        Compare {
            key: key.into(),
            result: CompareResult::Equal,
            target,
        }
    }

    /// `key`'s create_revision equals `revision` (0: the key is absent).
    pub fn create_revision(key: impl Into<Vec<u8>>, revision: i64) -> Self {
        let target = CompareTarget::CreateRevision(revision);
        Compare {
            key: key.into(),
            result: CompareResult::Equal,
            target,
        }
    }

    /// `key`'s version equals `version` (0: the key is absent).
    pub fn version(key: impl Into<Vec<u8>>, version: i64) -> Self {
        let target = CompareTarget::Version(version);
        Compare {
            key: key.into(),
            result: CompareResult::Equal,
            target,
        }
    }
}

impl Serialize for Compare {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine as _;
        use serde::ser::SerializeMap;
        let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("key", &b64(&self.key))?;
        m.serialize_entry("result", &self.result)?;
        match &self.target {
            CompareTarget::Version(v) => {
                m.serialize_entry("target", "VERSION")?;
                m.serialize_entry("version", &v.to_string())?;
            }
            CompareTarget::CreateRevision(v) => {
                m.serialize_entry("target", "CREATE")?;
                m.serialize_entry("create_revision", &v.to_string())?;
            }
            CompareTarget::ModRevision(v) => {
                m.serialize_entry("target", "MOD")?;
                m.serialize_entry("mod_revision", &v.to_string())?;
            }
            CompareTarget::Value(v) => {
                m.serialize_entry("target", "VALUE")?;
                m.serialize_entry("value", &b64(v))?;
            }
        }
        m.end()
    }
}

/// One operation of a transaction's branch.
#[derive(Clone, Debug, Serialize)]
pub enum TxnOp {
    /// Read a key or range.
    #[serde(rename = "request_range")]
    Range(RangeRequest),
    /// Write a key.
    #[serde(rename = "request_put")]
    Put(PutRequest),
    /// Delete a key or range.
    #[serde(rename = "request_delete_range")]
    Delete(DeleteRangeRequest),
}

/// `/v3/kv/txn`: if every compare holds, run `success`, else `failure`, atomically.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TxnRequest {
    /// The conditions (all must hold).
    pub compare: Vec<Compare>,
    /// The operations when they hold.
    pub success: Vec<TxnOp>,
    /// The operations when one does not.
    pub failure: Vec<TxnOp>,
}

/// The answer of one operation of a transaction.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TxnOpResponse {
    /// A range's answer.
    pub response_range: Option<RangeResponse>,
    /// A put's answer.
    pub response_put: Option<PutResponse>,
    /// A delete's answer.
    pub response_delete_range: Option<DeleteRangeResponse>,
}

/// The answer to a transaction.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TxnResponse {
    /// The header: after a write, its revision is the written keys' mod_revision.
    #[serde(default)]
    pub header: ResponseHeader,
    /// Whether every compare held (the success branch ran).
    #[serde(default)]
    pub succeeded: bool,
    /// The branch's answers, one per operation.
    #[serde(default)]
    pub responses: Vec<TxnOpResponse>,
}

/// A granted lease.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct LeaseGrant {
    /// The lease's id.
    #[serde(rename = "ID", default, with = "int64")]
    pub id: i64,
    /// Its time to live in seconds (etcd raises a TTL below its minimum).
    #[serde(rename = "TTL", default, with = "int64")]
    pub ttl: i64,
}

#[derive(Serialize)]
pub(crate) struct LeaseGrantRequest {
    #[serde(rename = "TTL", with = "int64")]
    pub(crate) ttl: i64,
}

#[derive(Serialize)]
pub(crate) struct LeaseIdRequest {
    #[serde(rename = "ID", with = "int64")]
    pub(crate) id: i64,
}

/// The keepalive endpoint is a stream: each answer is wrapped in `result`, and an
/// error inside the stream comes as `error` (with HTTP status 200).
#[derive(Deserialize)]
pub(crate) struct KeepAliveResponse {
    pub(crate) result: Option<LeaseGrant>,
    pub(crate) error: Option<GatewayError>,
}

/// One change seen by a watch.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct WatchEvent {
    /// `PUT` (etcd omits it: the default) or `DELETE`.
    #[serde(rename = "type", default)]
    pub kind: WatchEventKind,
    /// The key after the change (for a delete: the key and the deletion's revision).
    #[serde(default)]
    pub kv: KeyValue,
}

/// Whether a [`WatchEvent`] is a write or a deletion.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WatchEventKind {
    /// A write.
    #[default]
    Put,
    /// A deletion (or a lease lapsing under the key).
    Delete,
}

#[derive(Serialize)]
pub(crate) struct WatchCreate {
    #[serde(with = "b64")]
    pub(crate) key: Vec<u8>,
    #[serde(with = "b64", skip_serializing_if = "is_empty")]
    pub(crate) range_end: Vec<u8>,
    #[serde(with = "int64", skip_serializing_if = "is_zero")]
    pub(crate) start_revision: i64,
}

#[derive(Serialize)]
pub(crate) struct WatchRequest {
    pub(crate) create_request: WatchCreate,
}

#[derive(Deserialize)]
pub(crate) struct WatchMessage {
    pub(crate) result: Option<WatchResult>,
    pub(crate) error: Option<GatewayError>,
}

#[derive(Default, Deserialize)]
pub(crate) struct WatchResult {
    #[serde(default)]
    pub(crate) header: ResponseHeader,
    #[serde(default)]
    pub(crate) canceled: bool,
    #[serde(default, with = "int64")]
    pub(crate) compact_revision: i64,
    #[serde(default)]
    pub(crate) events: Vec<WatchEvent>,
}

/// The gateway's error: `{"error", "message", "code"}` as a unary call's body, or
/// `{"grpc_code", "http_code", "message", "http_status"}` inside a stream.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct GatewayError {
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default, alias = "grpc_code")]
    pub(crate) code: i32,
}

/// The end of the range of every key starting with `prefix` (etcd's "prefix" end:
/// the prefix with its last byte below 0xff incremented).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    // Answers as etcd 3.4.23's gateway wrote them.
    const RANGE: &str = r#"{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"2","raft_term":"2"},"kvs":[{"key":"L2Mvb3duZXJzLzE=","create_revision":"2","mod_revision":"2","version":"1","value":"bjE="}],"count":"1"}"#;
    const TXN_FAILED: &str = r#"{"header":{"revision":"7"},"responses":[{"response_range":{"header":{"revision":"7"},"kvs":[{"key":"L2Mvb3duZXJzLzk=","create_revision":"7","mod_revision":"7","version":"1","value":"bjE="}],"count":"1"}}]}"#;
    const WATCH: &str = r#"{"result":{"header":{"revision":"5"},"events":[{"kv":{"key":"L2MvZnJvbnQ=","create_revision":"4","mod_revision":"4","version":"1","value":"bjE="}},{"type":"DELETE","kv":{"key":"L2Mvb3duZXJzLzE=","mod_revision":"5"}}]}}"#;
    const KEEPALIVE_GONE: &str =
        r#"{"result":{"header":{"revision":"9"},"ID":"2324035622612983571"}}"#;
    const STREAM_ERROR: &str = r#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}}"#;

    #[test]
    fn answers_in_the_gateways_json_are_read() {
        let r: RangeResponse = serde_json::from_str(RANGE).unwrap();
        assert_eq!(r.header.revision, 2);
        assert_eq!(
            (r.kvs[0].key.as_slice(), r.kvs[0].value.as_slice()),
            (&b"/c/owners/1"[..], &b"n1"[..])
        );
        assert_eq!((r.kvs[0].mod_revision, r.kvs[0].lease), (2, 0));
        let t: TxnResponse = serde_json::from_str(TXN_FAILED).unwrap();
        assert!(!t.succeeded);
        assert_eq!(
            t.responses[0].response_range.as_ref().unwrap().kvs[0].mod_revision,
            7
        );
        let w: WatchMessage = serde_json::from_str(WATCH).unwrap();
        let events = w.result.unwrap().events;
        assert_eq!(events[0].kind, WatchEventKind::Put);
        assert_eq!(
            (events[1].kind, events[1].kv.mod_revision),
            (WatchEventKind::Delete, 5)
        );
        let k: KeepAliveResponse = serde_json::from_str(KEEPALIVE_GONE).unwrap();
        assert_eq!(k.result.unwrap().ttl, 0, "a lease that is gone has no TTL");
        let e: KeepAliveResponse = serde_json::from_str(STREAM_ERROR).unwrap();
        assert!(e.result.is_none());
        assert_eq!(e.error.unwrap().code, 14);
    }

    #[test]
    fn requests_use_the_gateways_field_names() {
        let txn = TxnRequest {
            compare: vec![
                Compare::mod_revision(b"/c/owners/1".to_vec(), 2),
                Compare::create_revision(b"/c/front".to_vec(), 0),
            ],
            success: vec![TxnOp::Put(PutRequest {
                key: b"/c/front".to_vec(),
                value: b"f".to_vec(),
                lease: 7,
            })],
            failure: vec![TxnOp::Range(RangeRequest {
                key: b"/c/front".to_vec(),
                range_end: vec![],
            })],
        };
        let json = serde_json::to_value(&txn).unwrap();
        let expected = serde_json::json!({
            "compare": [
                {"key": "L2Mvb3duZXJzLzE=", "result": "EQUAL", "target": "MOD", "mod_revision": "2"},
                {"key": "L2MvZnJvbnQ=", "result": "EQUAL", "target": "CREATE", "create_revision": "0"},
            ],
            "success": [{"request_put": {"key": "L2MvZnJvbnQ=", "value": "Zg==", "lease": "7"}}],
            "failure": [{"request_range": {"key": "L2MvZnJvbnQ="}}],
        });
        assert_eq!(json, expected);
        assert_eq!(prefix_end(b"/c/nodes/"), b"/c/nodes0");
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
    }
}
