//! `EtcdClient`: etcd v3's JSON gateway over HTTP/1.1 (hyper), with failover
//! between the members of a cluster.
//!
//! Every call is one `POST` of a JSON body to one member. A member that refuses the
//! connection, does not answer within the request timeout, or answers
//! `Unavailable` (gRPC code 14, e.g. it lost its quorum) is skipped and the next one
//! tried; the member that answered last is tried first next time. When every member
//! failed, the client goes round again after a short pause until one request
//! timeout per member has passed (a member answers again once the others have
//! elected a new leader), then reports [`ClusterError::Unavailable`]. A write retried on
//! another member after a timeout may have been applied by the first: the
//! coordination records are written with compares (a retried claim fails its compare
//! and the caller reads again) or are idempotent puts, and a lease granted twice
//! expires unused.
//!
//! Changes are waited for with the gateway's streaming `/v3/watch`, one watch per
//! wait (see [`EtcdClient::watch_once`]): the caller keeps a revision cursor, so a
//! watch broken by a member's death loses nothing — the next one starts from the
//! cursor on another member.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::{timeout_at, Instant};

use crate::record::{RecordedRequest, Recorder};
use crate::wire::*;
use crate::ClusterError;

/// gRPC's `Unavailable`: the member cannot serve now (no leader, no quorum).
const UNAVAILABLE: i32 = 14;
/// The pause before another round over the members.
const ROUND_PAUSE: Duration = Duration::from_millis(200);
/// The largest answer read from etcd (the coordination records are small).
const MAX_ANSWER: usize = 4 << 20;

/// A client of one etcd cluster through its JSON gateway. Cheap to clone (the
/// clones share connections).
///
/// What etcd sees: the requests of the typed calls below, nothing else; a
/// [`Recorder`] set with [`EtcdClient::with_recorder`] sees each one first.
#[derive(Clone)]
pub struct EtcdClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// `http://host:port` of each member.
    endpoints: Vec<String>,
    /// The index of the member that answered last (tried first).
    preferred: AtomicUsize,
    /// The bound on one request to one member (connection, answer and body).
    timeout: Duration,
    http: Client<HttpConnector, Full<Bytes>>,
    recorder: Option<Arc<dyn Recorder>>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.inner.endpoints)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// What one [`EtcdClient::watch_once`] saw.
#[derive(Clone, Debug, Default)]
pub struct WatchOutcome {
    /// The changes, in revision order (empty: none within the wait).
    pub events: Vec<WatchEvent>,
    /// The store's revision as of the last answer (a cursor: watch again from
    /// `revision + 1`).
    pub revision: i64,
    /// The start revision was compacted away: changes may have been missed; read
    /// the current state again.
    pub compacted: bool,
}

/// One attempt's failure: try the next member, or give up.
enum Attempt {
    Next(String),
    Fatal(ClusterError),
}

impl EtcdClient {
    /// A client of the cluster whose members' client URLs are `endpoints`
    /// (`http://host:port` or `host:port`), each request to one member bounded by
    /// `timeout`. Connects lazily: etcd sees nothing until the first call.
    pub fn new<I, S>(endpoints: I, timeout: Duration) -> Result<Self, ClusterError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut list = Vec::new();
        for e in endpoints {
            let e = e.as_ref().trim().trim_end_matches('/');
            let base = if e.contains("://") {
                e.to_string()
            } else {
                format!("http://{e}")
            };
            if !base.starts_with("http://") {
                return Err(ClusterError::InvalidName {
                    what: "endpoint",
                    value: e.to_string(),
                    rule: "an http:// URL or host:port",
                });
            }
            list.push(base);
        }
        if list.is_empty() {
            return Err(ClusterError::InvalidName {
                what: "endpoint",
                value: String::new(),
                rule: "at least one endpoint",
            });
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let inner = Inner {
            endpoints: list,
            preferred: AtomicUsize::new(0),
            timeout,
            http,
            recorder: None,
        };
        Ok(EtcdClient {
            inner: Arc::new(inner),
        })
    }

    /// The same client with `recorder` seeing every request before it is sent.
    pub fn with_recorder(self, recorder: Arc<dyn Recorder>) -> Self {
        let inner = Inner {
            endpoints: self.inner.endpoints.clone(),
            preferred: AtomicUsize::new(self.inner.preferred.load(Ordering::Relaxed)),
            timeout: self.inner.timeout,
            http: self.inner.http.clone(),
            recorder: Some(recorder),
        };
        EtcdClient {
            inner: Arc::new(inner),
        }
    }

    /// The per-member request timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Reads `key`, or every key in `[key, range_end)` when `range_end` is not empty.
    /// etcd sees `/v3/kv/range` with the key and range end (a linearizable read).
    pub async fn range(&self, key: &[u8], range_end: &[u8]) -> Result<RangeResponse, ClusterError> {
        let req = RangeRequest {
            key: key.to_vec(),
            range_end: range_end.to_vec(),
        };
        self.call("/v3/kv/range", &req, range_keys(key, range_end), vec![])
            .await
    }

    /// Reads every key starting with `prefix`.
    pub async fn range_prefix(&self, prefix: &[u8]) -> Result<RangeResponse, ClusterError> {
        self.range(prefix, &prefix_end(prefix)).await
    }

    /// Writes `value` at `key`, attached to `lease` (0: none). etcd sees
    /// `/v3/kv/put` with the key, the value and the lease id.
    pub async fn put(
        &self,
        key: &[u8],
        value: &[u8],
        lease: i64,
    ) -> Result<PutResponse, ClusterError> {
        let req = PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease,
        };
        self.call("/v3/kv/put", &req, vec![key.to_vec()], vec![value.to_vec()])
            .await
    }

    /// Deletes `key`, or every key in `[key, range_end)`. etcd sees
    /// `/v3/kv/deleterange` with the key and range end.
    pub async fn delete(
        &self,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<DeleteRangeResponse, ClusterError> {
        let req = DeleteRangeRequest {
            key: key.to_vec(),
            range_end: range_end.to_vec(),
        };
        self.call(
            "/v3/kv/deleterange",
            &req,
            range_keys(key, range_end),
            vec![],
        )
        .await
    }

    /// Runs a transaction: `success` if every compare holds, else `failure`. etcd
    /// sees `/v3/kv/txn` with every compare and both branches.
    pub async fn txn(&self, txn: &TxnRequest) -> Result<TxnResponse, ClusterError> {
        let mut keys: Vec<Vec<u8>> = txn.compare.iter().map(|c| c.key.clone()).collect();
        let mut values = Vec::new();
        for c in &txn.compare {
            if let CompareTarget::Value(v) = &c.target {
                values.push(v.clone());
            }
        }
        for op in txn.success.iter().chain(&txn.failure) {
            match op {
                TxnOp::Range(r) => keys.extend([r.key.clone(), r.range_end.clone()]),
                TxnOp::Delete(d) => keys.extend([d.key.clone(), d.range_end.clone()]),
                TxnOp::Put(p) => {
                    keys.push(p.key.clone());
                    values.push(p.value.clone());
                }
            }
        }
        keys.retain(|k| !k.is_empty());
        self.call("/v3/kv/txn", txn, keys, values).await
    }

    /// Grants a lease of `ttl_secs` (etcd raises it to its minimum, 2 s with the
    /// default election timeout; the answer says the TTL granted). etcd sees
    /// `/v3/lease/grant` with the TTL.
    pub async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrant, ClusterError> {
        let req = LeaseGrantRequest { ttl: ttl_secs };
        self.call("/v3/lease/grant", &req, vec![], vec![]).await
    }

    /// Renews a lease once. Returns the TTL it now has; 0 means the lease no longer
    /// exists (it lapsed or was revoked). etcd sees one message on
    /// `/v3/lease/keepalive` with the lease id.
    pub async fn lease_keepalive(&self, id: i64) -> Result<i64, ClusterError> {
        let req = LeaseIdRequest { id };
        let path = "/v3/lease/keepalive";
        let resp: KeepAliveResponse = self.call(path, &req, vec![], vec![]).await?;
        match (resp.result, resp.error) {
            // An error inside the stream (e.g. the member lost its leader) says
            // nothing about the lease: the caller retries.
            (_, Some(err)) => Err(ClusterError::Etcd {
                path,
                code: err.code,
                message: err.message,
            }),
            (Some(result), None) => Ok(result.ttl),
            (None, None) => Err(ClusterError::Protocol {
                path,
                detail: "no result".into(),
            }),
        }
    }

    /// Revokes a lease: every key attached to it is deleted now. A lease that no
    /// longer exists is not an error. etcd sees `/v3/lease/revoke` with the id.
    pub async fn lease_revoke(&self, id: i64) -> Result<(), ClusterError> {
        let req = LeaseIdRequest { id };
        match self
            .call::<_, serde_json::Value>("/v3/lease/revoke", &req, vec![], vec![])
            .await
        {
            Ok(_) => Ok(()),
            Err(ClusterError::Etcd { code: 5, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `wait` for changes to `key` (or to `[key, range_end)`) at
    /// revisions from `start_revision` on (0: from now), through one streaming
    /// `/v3/watch` on one member. Returns the first batch of changes, or none when
    /// the wait ends first or the member's stream breaks (the caller watches again
    /// from its cursor; the next watch starts on another member). etcd sees a watch
    /// creation with the key, range end and start revision.
    pub async fn watch_once(
        &self,
        key: &[u8],
        range_end: &[u8],
        start_revision: i64,
        wait: Duration,
    ) -> Result<WatchOutcome, ClusterError> {
        let path = "/v3/watch";
        let create = WatchCreate {
            key: key.to_vec(),
            range_end: range_end.to_vec(),
            start_revision,
        };
        let body = to_json(
            path,
            &WatchRequest {
                create_request: create,
            },
        )?;
        self.record(path, range_keys(key, range_end), vec![], &body);
        let deadline = Instant::now() + wait;
        let n = self.inner.endpoints.len();
        let first = self.inner.preferred.load(Ordering::Relaxed);
        let mut last = String::new();
        for i in 0..n {
            let idx = (first + i) % n;
            let connect_by = (Instant::now() + self.inner.timeout).min(deadline);
            let resp = match timeout_at(connect_by, self.send(idx, path, body.clone())).await {
                Ok(Ok(resp)) if resp.status().is_success() => resp,
                Ok(Ok(resp)) => match self.failure(path, resp, connect_by).await {
                    Attempt::Next(e) => {
                        last = e;
                        continue;
                    }
                    Attempt::Fatal(e) => return Err(e),
                },
                Ok(Err(e)) => {
                    last = format!("{}: {e}", self.inner.endpoints[idx]);
                    continue;
                }
                Err(_) if Instant::now() >= deadline => return Ok(WatchOutcome::default()),
                Err(_) => {
                    last = format!(
                        "{}: no answer within {:?}",
                        self.inner.endpoints[idx], self.inner.timeout
                    );
                    continue;
                }
            };
            self.inner.preferred.store(idx, Ordering::Relaxed);
            let outcome = read_watch(path, resp.into_body(), deadline).await?;
            if outcome.is_none() {
                // The stream broke before the deadline: prefer the next member.
                self.inner.preferred.store((idx + 1) % n, Ordering::Relaxed);
            }
            return Ok(outcome.unwrap_or_default());
        }
        Err(ClusterError::Unavailable { tried: n, last })
    }

    fn record(&self, path: &'static str, keys: Vec<Vec<u8>>, values: Vec<Vec<u8>>, body: &Bytes) {
        if let Some(r) = &self.inner.recorder {
            let body = String::from_utf8_lossy(body).into_owned();
            r.record(&RecordedRequest {
                path,
                keys,
                values,
                body,
            });
        }
    }

    async fn send(
        &self,
        idx: usize,
        path: &str,
        body: Bytes,
    ) -> Result<hyper::Response<Incoming>, String> {
        let uri = format!("{}{path}", self.inner.endpoints[idx]);
        let req = hyper::Request::post(uri)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        self.inner
            .http
            .request(req)
            .await
            .map_err(|e| format!("{e:?}"))
    }

    /// A non-2xx answer: the member is unavailable (try the next), or etcd refused.
    async fn failure(
        &self,
        path: &'static str,
        resp: hyper::Response<Incoming>,
        by: Instant,
    ) -> Attempt {
        let status = resp.status();
        let body = match timeout_at(by, read_body(resp.into_body())).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return Attempt::Next(e),
            Err(_) => return Attempt::Next(format!("{path}: answer body timed out")),
        };
        let err: GatewayError = serde_json::from_slice(&body).unwrap_or_default();
        if err.code == UNAVAILABLE || status.is_server_error() && err.code == 0 {
            return Attempt::Next(format!("{path}: {status}: {}", err.message));
        }
        if err.code == 0 {
            let detail = format!("{status}: {}", String::from_utf8_lossy(&body));
            return Attempt::Fatal(ClusterError::Protocol { path, detail });
        }
        Attempt::Fatal(ClusterError::Etcd {
            path,
            code: err.code,
            message: err.message,
        })
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &'static str,
        req: &Req,
        keys: Vec<Vec<u8>>,
        values: Vec<Vec<u8>>,
    ) -> Result<Resp, ClusterError> {
        let body = to_json(path, req)?;
        self.record(path, keys, values, &body);
        let n = self.inner.endpoints.len();
        let first = self.inner.preferred.load(Ordering::Relaxed);
        let mut last = String::new();
        // Every member at least once; then again, after a pause per round, until
        // the budget of one timeout per member is spent (a member that just lost
        // its leader answers again once the others have elected one).
        let budget = Instant::now() + self.inner.timeout * n as u32;
        let mut tried = 0;
        for i in 0.. {
            if i >= n && Instant::now() >= budget {
                break;
            }
            if i > 0 && i % n == 0 {
                tokio::time::sleep(ROUND_PAUSE).await;
            }
            tried += 1;
            let idx = (first + i) % n;
            let by = Instant::now() + self.inner.timeout;
            let attempt = async {
                let resp = self
                    .send(idx, path, body.clone())
                    .await
                    .map_err(Attempt::Next)?;
                if !resp.status().is_success() {
                    return Err(self.failure(path, resp, by).await);
                }
                read_body(resp.into_body()).await.map_err(Attempt::Next)
            };
            match timeout_at(by, attempt).await {
                Ok(Ok(answer)) => {
                    self.inner.preferred.store(idx, Ordering::Relaxed);
                    return serde_json::from_slice(&answer).map_err(|e| ClusterError::Protocol {
                        path,
                        detail: e.to_string(),
                    });
                }
                Ok(Err(Attempt::Fatal(e))) => return Err(e),
                Ok(Err(Attempt::Next(e))) => last = format!("{}: {e}", self.inner.endpoints[idx]),
                Err(_) => {
                    last = format!(
                        "{}: no answer within {:?}",
                        self.inner.endpoints[idx], self.inner.timeout
                    )
                }
            }
        }
        Err(ClusterError::Unavailable { tried, last })
    }
}

fn to_json<T: Serialize>(path: &'static str, v: &T) -> Result<Bytes, ClusterError> {
    serde_json::to_vec(v)
        .map(Bytes::from)
        .map_err(|e| ClusterError::Protocol {
            path,
            detail: e.to_string(),
        })
}

async fn read_body(mut body: Incoming) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if let Some(data) = frame.data_ref() {
            if out.len() + data.len() > MAX_ANSWER {
                return Err(format!("answer larger than {MAX_ANSWER} bytes"));
            }
            out.extend_from_slice(data);
        }
    }
    Ok(out)
}

/// Reads a watch stream until its first batch of events or the deadline. `None`:
/// the stream broke (or ended) before either.
async fn read_watch(
    path: &'static str,
    mut body: Incoming,
    deadline: Instant,
) -> Result<Option<WatchOutcome>, ClusterError> {
    let mut buf: Vec<u8> = Vec::new();
    let mut revision = 0;
    loop {
        // Every complete message in the buffer (the gateway writes one JSON object
        // per message, newline-delimited).
        let mut stream = serde_json::Deserializer::from_slice(&buf).into_iter::<WatchMessage>();
        for msg in stream.by_ref() {
            let msg = match msg {
                Ok(m) => m,
                Err(e) if e.is_eof() => break,
                Err(e) => {
                    return Err(ClusterError::Protocol {
                        path,
                        detail: e.to_string(),
                    })
                }
            };
            if let Some(err) = msg.error {
                if err.code == UNAVAILABLE {
                    return Ok(None);
                }
                return Err(ClusterError::Etcd {
                    path,
                    code: err.code,
                    message: err.message,
                });
            }
            let Some(result) = msg.result else { continue };
            revision = revision.max(result.header.revision);
            if result.compact_revision != 0 {
                return Ok(Some(WatchOutcome {
                    events: vec![],
                    revision,
                    compacted: true,
                }));
            }
            if result.canceled {
                return Ok(None);
            }
            if !result.events.is_empty() {
                let last = result
                    .events
                    .iter()
                    .map(|e| e.kv.mod_revision)
                    .max()
                    .unwrap_or(0);
                let revision = revision.max(last);
                return Ok(Some(WatchOutcome {
                    events: result.events,
                    revision,
                    compacted: false,
                }));
            }
        }
        let used = stream.byte_offset();
        buf.drain(..used);
        if buf.len() > MAX_ANSWER {
            return Err(ClusterError::Protocol {
                path,
                detail: "watch message too large".into(),
            });
        }
        match timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return Ok(Some(WatchOutcome {
                    events: vec![],
                    revision,
                    compacted: false,
                }))
            }
            Ok(None) | Ok(Some(Err(_))) => return Ok(None),
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    buf.extend_from_slice(data);
                }
            }
        }
    }
}

/// The keys a range request names, for the recorder: the key, and the range
/// end when there is one.
fn range_keys(key: &[u8], range_end: &[u8]) -> Vec<Vec<u8>> {
    [key, range_end]
        .into_iter()
        .filter(|k| !k.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}
