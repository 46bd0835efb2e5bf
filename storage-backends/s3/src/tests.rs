//! Tests of the S3 back-end that need no S3 service (those against MinIO are in
//! the `oram-tests` crate).

use super::*;
use oram_blockstore::BlockStoreExt;

/// A server that accepts connections and never answers: every attempt of a
/// request to it runs into its attempt timeout (30 s here, 4 attempts), so
/// only the write deadline ends a write sooner. Each write fails as a timeout
/// instead of hanging (the outer bound is generous; nothing is asserted about
/// how fast).
#[tokio::test]
async fn a_write_to_a_silent_server_is_abandoned_at_its_deadline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let held = accepted.clone();
    let server = tokio::spawn(async move {
        // Bounded: the test makes a handful of connections.
        for _ in 0..64 {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            held.lock().unwrap().push(conn);
        }
    });
    let store = S3Store::new(&S3StoreConfig {
        endpoint: Some(format!("http://{addr}")),
        bucket: "b".into(),
        prefix: "v".into(),
        path_style: true,
        credentials: Some(("ak".into(), "sk".into())),
        attempt_timeout: Duration::from_secs(30),
        max_attempts: 4,
        write_deadline: Some(Duration::from_secs(1)),
        ..S3StoreConfig::default()
    })
    .await;
    let key = ObjKey::new("meta/checkpoint").unwrap();
    let outer = Duration::from_secs(60);
    let timed_out = |r: Result<()>, what: &str| match r {
        Err(StoreError::Unavailable(m)) if m.contains("timed out") => {}
        other => panic!("{what}: expected a timeout, got {other:?}"),
    };
    let put_if = tokio::time::timeout(
        outer,
        store.put_if(&key, Bytes::from_static(b"x"), PutCondition::IfAbsent),
    )
    .await
    .expect("the conditional PUT hung past the deadline");
    timed_out(put_if.map(|_| ()), "put_if");
    let put = tokio::time::timeout(
        outer,
        store.put_many(vec![(key.clone(), Bytes::from_static(b"x"))]),
    )
    .await
    .expect("the PUT hung past the deadline");
    timed_out(put, "put_many");
    let del = tokio::time::timeout(outer, store.delete_many(std::slice::from_ref(&key)))
        .await
        .expect("the delete hung past the deadline");
    timed_out(del, "delete_many");
    assert!(
        !accepted.lock().unwrap().is_empty(),
        "the writes reached the silent server"
    );
    server.abort();
}
