//! A proxy serving S3 on a loopback port over a temporary data directory,
//! with an aws-sdk-s3 client signed in as its root user (`alice`): the
//! harness of the S3 API tests in `tests/tests/`; more users and TLS on demand.

use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::Client;
use oram_proxy::{Config, UserConfig};

/// A running proxy and a client of its S3 API.
pub struct S3Proxy {
    server: Option<oram_proxy::Server>,
    _dir: tempfile::TempDir,
    /// A path-style client signed in as `alice`, the root user.
    pub client: Client,
    endpoint: String,
    /// The CA certificate (PEM) of a TLS proxy.
    ca: Option<Vec<u8>>,
}

/// A path-style client of `endpoint` signed in as `user`; over TLS, trusting
/// only the CA certificate `ca`.
fn client(endpoint: &str, ca: Option<&[u8]>, user: &str, secret: &str) -> Client {
    let http = match ca {
        None => aws_smithy_http_client::Builder::new().build_http(),
        Some(ca) => {
            use aws_smithy_http_client::tls;
            let trust = tls::TrustStore::empty().with_pem_certificate(ca);
            aws_smithy_http_client::Builder::new()
                .tls_provider(tls::Provider::Rustls(
                    tls::rustls_provider::CryptoMode::AwsLc,
                ))
                .tls_context(
                    tls::TlsContext::builder()
                        .with_trust_store(trust)
                        .build()
                        .expect("TLS context"),
                )
                .build_https()
        }
    };
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new(user, secret, None, None, "t"))
        .http_client(http)
        .build();
    Client::from_conf(conf)
}

impl S3Proxy {
    /// Starts a proxy of 4096 blocks on 127.0.0.1 with a fresh data directory.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// [`S3Proxy::start`], with `tune` applied to the configuration first
    /// (more users, say).
    pub async fn start_with(tune: impl FnOnce(&mut Config)) -> Self {
        Self::start_as(tune, false).await
    }

    /// [`S3Proxy::start_with`], serving S3 over TLS only, with a certificate
    /// for 127.0.0.1 signed by a private CA that its clients trust.
    pub async fn start_tls(tune: impl FnOnce(&mut Config)) -> Self {
        Self::start_as(tune, true).await
    }

    async fn start_as(tune: impl FnOnce(&mut Config), tls: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            data_dir: dir.path().join("data"),
            ..Config::default()
        };
        cfg.s3.listen = "127.0.0.1:0".into();
        cfg.engine.capacity_blocks = 1 << 12;
        let ca = tls.then(|| {
            let made = oram_server::tls::generate_self_signed(
                &dir.path().join("tls"),
                &["127.0.0.1".to_string()],
            )
            .expect("certificate made");
            cfg.tls.cert_file = Some(made.cert_file);
            cfg.tls.key_file = Some(made.key_file);
            std::fs::read(made.ca_file).unwrap()
        });
        tune(&mut cfg);
        let root = UserConfig {
            access_key: "alice".into(),
            secret_key: "alicesecret".into(),
        };
        let server = oram_proxy::start(&cfg, Some(root))
            .await
            .expect("proxy starts");
        let scheme = if ca.is_some() { "https" } else { "http" };
        let endpoint = format!("{scheme}://{}", server.s3_addr());
        let client = client(&endpoint, ca.as_deref(), "alice", "alicesecret");
        Self {
            server: Some(server),
            _dir: dir,
            client,
            endpoint,
            ca,
        }
    }

    /// A path-style client of this proxy signed in as `user`.
    pub fn client_as(&self, user: &str, secret: &str) -> Client {
        client(&self.endpoint, self.ca.as_deref(), user, secret)
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
