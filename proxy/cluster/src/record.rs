//! The recording hook: every request the client sends to etcd, as etcd sees it,
//! handed to a [`Recorder`] before it goes out. Tests use it to show that no block
//! id, position or object name ever reaches etcd.

use std::sync::Mutex;

/// One request as sent to etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The gateway path (`/v3/kv/put`, `/v3/lease/keepalive`, ...).
    pub path: &'static str,
    /// Every key and range end in the request (a transaction's compares and both
    /// branches included), decoded from base64.
    pub keys: Vec<Vec<u8>>,
    /// Every value the request would write, decoded.
    pub values: Vec<Vec<u8>>,
    /// The JSON body exactly as sent (keys and values in base64).
    pub body: String,
}

/// Receives every request before the client sends it (once per request, not once
/// per member tried).
pub trait Recorder: Send + Sync {
    /// Called with the request about to be sent.
    fn record(&self, request: &RecordedRequest);
}

/// A [`Recorder`] that keeps every request in memory, for tests.
#[derive(Debug, Default)]
pub struct MemoryRecorder {
    /// The requests in the order they were sent. A std mutex held only to push or
    /// copy the list (never across an await).
    requests: Mutex<Vec<RecordedRequest>>,
}

impl MemoryRecorder {
    /// An empty recording.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every request recorded so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Recorder for MemoryRecorder {
    fn record(&self, request: &RecordedRequest) {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request.clone());
    }
}
