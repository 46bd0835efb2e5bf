//! The proxy serving S3 on the Ring ORAM engine: a real client (aws-sdk-s3) over
//! TCP, a restart on the same data directory (volume parameters, state database and
//! checkpoint), fsck, recovery of a lost data directory from the backend, and a
//! refused start with other Ring parameters.

use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use oram_proxy::{Config, Engine, UserConfig};
use oram_tests::block_data;

fn config(dir: &std::path::Path) -> Config {
    let mut cfg = Config {
        data_dir: dir.join("data"),
        ..Config::default()
    };
    cfg.s3.listen = "127.0.0.1:0".into();
    cfg.engine.kind = Engine::new(oram_ring::RingSettings {
        ring_preset: "small".into(),
        cached_levels: Some(3),
        ..Default::default()
    });
    cfg.engine.capacity_blocks = 2048;
    cfg.engine.block_size = 4096;
    cfg.backend.path = Some(dir.join("store"));
    // Outside the data directory, so that the volume can be recovered without it.
    cfg.key.key_file = Some(dir.join("master.key"));
    cfg.users = vec![UserConfig {
        access_key: "alice".into(),
        secret_key: "alicesecret".into(),
    }];
    cfg
}

fn client(endpoint: &str) -> Client {
    let http = aws_smithy_http_client::Builder::new().build_http();
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new("alice", "alicesecret", None, None, "test"))
        .http_client(http)
        .build();
    Client::from_conf(conf)
}

async fn get(c: &Client, key: &str) -> Vec<u8> {
    c.get_object()
        .bucket("ringb")
        .key(key)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_serves_s3_on_ring_oram_across_restart_fsck_and_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let big = block_data(1, 1, 300_000).to_vec();
    {
        let server = oram_proxy::start(&cfg, None).await.expect("proxy starts");
        assert_eq!(server.volume().engine.name(), "ring");
        let c = client(&format!("http://{}", server.s3_addr()));
        c.create_bucket().bucket("ringb").send().await.unwrap();
        c.put_object()
            .bucket("ringb")
            .key("small.txt")
            .body(ByteStream::from_static(b"hello ring"))
            .send()
            .await
            .unwrap();
        c.put_object()
            .bucket("ringb")
            .key("big.bin")
            .body(ByteStream::from(big.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(get(&c, "small.txt").await, b"hello ring");
        assert_eq!(get(&c, "big.bin").await, big);
        let listed = c.list_objects_v2().bucket("ringb").send().await.unwrap();
        assert_eq!(listed.key_count(), Some(2));
        server
            .shutdown(std::time::Duration::from_secs(10))
            .await
            .unwrap();
    }
    // Restart on the same directory: parameters, state and data are all there.
    {
        let server = oram_proxy::start(&cfg, None).await.expect("proxy restarts");
        let c = client(&format!("http://{}", server.s3_addr()));
        assert_eq!(get(&c, "big.bin").await, big);
        server
            .shutdown(std::time::Duration::from_secs(10))
            .await
            .unwrap();
    }
    let rep = oram_proxy::fsck(&cfg, &|_, _, _| {}).await.unwrap();
    assert!(rep.is_clean(), "{rep:?}");
    // Other Ring parameters are refused with a message naming them.
    let mut other = cfg.clone();
    other.engine.kind = Engine::new(oram_ring::RingSettings {
        ring_preset: "large".into(),
        cached_levels: Some(3),
        ..Default::default()
    });
    let err = oram_proxy::start(&other, None)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("z 4"), "{err}");
    // The data directory lost: recover it from the backend's checkpoint.
    std::fs::remove_dir_all(&cfg.data_dir).unwrap();
    let r = oram_proxy::recover(&cfg).await.unwrap();
    assert_eq!(r.objects, 2);
    let server = oram_proxy::start(&cfg, None)
        .await
        .expect("recovered proxy starts");
    let c = client(&format!("http://{}", server.s3_addr()));
    assert_eq!(get(&c, "small.txt").await, b"hello ring");
    assert_eq!(get(&c, "big.bin").await, big);
    server
        .shutdown(std::time::Duration::from_secs(10))
        .await
        .unwrap();
}
