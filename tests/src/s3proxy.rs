//! A proxy serving S3 on a loopback port over a temporary data directory,
//! with an aws-sdk-s3 client signed in as its root user (`alice`): the
//! harness of the S3 API tests in `tests/tests/`.

use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::Client;
use oram_proxy::{Config, UserConfig};

/// A running proxy and a client of its S3 API.
pub struct S3Proxy {
    server: Option<oram_proxy::Server>,
    _dir: tempfile::TempDir,
    /// A path-style client signed in as `alice`, the root user.
    pub client: Client,
}

impl S3Proxy {
    /// Starts a proxy of 4096 blocks on 127.0.0.1 with a fresh data directory.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            data_dir: dir.path().join("data"),
            ..Config::default()
        };
        cfg.s3.listen = "127.0.0.1:0".into();
        cfg.engine.capacity_blocks = 1 << 12;
        let root = UserConfig {
            access_key: "alice".into(),
            secret_key: "alicesecret".into(),
        };
        let server = oram_proxy::start(&cfg, Some(root))
            .await
            .expect("proxy starts");
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version_latest()
            .region(Region::new("us-east-1"))
            .endpoint_url(format!("http://{}", server.s3_addr()))
            .force_path_style(true)
            .credentials_provider(Credentials::new("alice", "alicesecret", None, None, "t"))
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .build();
        Self {
            server: Some(server),
            _dir: dir,
            client: Client::from_conf(conf),
        }
    }

    /// The running proxy (its object layer: to run a background sweep at a
    /// time the test chooses).
    pub fn server(&self) -> &oram_proxy::Server {
        self.server.as_ref().expect("running")
    }

    /// Shuts the proxy down cleanly.
    pub async fn stop(mut self) {
        self.server
            .take()
            .unwrap()
            .shutdown(std::time::Duration::from_secs(10))
            .await
            .unwrap();
    }
}
