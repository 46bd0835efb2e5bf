//! The Swift listener: its users (the S3 users' accounts, plus `[[swift.users]]`),
//! the login rate limit, and the handler the accept loop serves. It runs on its
//! own address (`--swift-listen`, off by default) with the S3 listener's accept
//! loop, connection limits and header timeout, and a concurrency limit of its own
//! (`swift.max_concurrent_requests`, then 503).

use std::sync::Arc;
use std::time::Duration;

use oram_objects::ObjectLayer;
use oram_swift::{SwiftApi, SwiftUser};
use oram_volume::UserConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::ServerConfig;
use crate::guard;
use crate::serve::{serve, PeerAddr, ServedBody};
use crate::tasks::Shutdown;
use crate::telemetry::{self, Telemetry};
use crate::tls::Tls;
use crate::ServeError;

/// The Swift users: a Swift account is an S3 access key, `<key>:<key>` with the
/// secret administers it; `[[swift.users]]` adds users to those accounts.
fn users(cfg: &ServerConfig, s3_users: &[UserConfig]) -> Result<Vec<SwiftUser>, ServeError> {
    let mut swift_users: Vec<SwiftUser> = s3_users
        .iter()
        .map(|u| SwiftUser {
            account: u.access_key.clone(),
            user: u.access_key.clone(),
            key: u.secret_key.clone(),
            admin: true,
        })
        .collect();
    for u in &cfg.swift.users {
        if !s3_users.iter().any(|s| s.access_key == u.account) {
            return Err(ServeError::Config(format!(
                "swift user {}:{}: no S3 user has access key {:?}",
                u.account, u.user, u.account
            )));
        }
        if swift_users
            .iter()
            .any(|s| s.account == u.account && s.user == u.user)
        {
            return Err(ServeError::Config(format!(
                "swift user {}:{} is defined twice",
                u.account, u.user
            )));
        }
        swift_users.push(SwiftUser {
            account: u.account.clone(),
            user: u.user.clone(),
            key: u.key.clone(),
            admin: u.admin,
        });
    }
    Ok(swift_users)
}

/// The Swift listener's serving task on `listener`, until `stop`.
pub(crate) fn listener_task(
    cfg: &ServerConfig,
    listener: TcpListener,
    layer: ObjectLayer,
    s3_users: &[UserConfig],
    tel: Arc<Telemetry>,
    tls: Option<Arc<Tls>>,
    stop: Shutdown,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, ServeError> {
    let api = SwiftApi::new(
        layer,
        users(cfg, s3_users)?,
        oram_swift::SwiftConfig {
            token_ttl: Duration::from_secs(cfg.swift.token_ttl_secs),
            https: tls.is_some(),
        },
    );
    // Failed logins: 20 at once, then 2 per second, per client address.
    let failures = Arc::new(guard::RateLimiter::new(20, 2.0, 100_000));
    let handler = move |req: http::Request<telemetry::Counted<ServedBody>>| {
        let api = api.clone();
        let failures = failures.clone();
        async move {
            let login = guard::is_swift_login(&req)
                .then(|| req.extensions().get::<PeerAddr>().map(|p| p.0.ip()))
                .flatten();
            if let Some(ip) = login {
                if let Err(wait) = failures.check(ip) {
                    let r = guard::swift_too_many(wait);
                    return Ok::<_, std::convert::Infallible>(r.map(SwiftOrS3::S3));
                }
            }
            let resp = api.handle(req).await;
            if let Some(ip) = login {
                if resp.status() == http::StatusCode::UNAUTHORIZED {
                    let _ = failures.take(ip);
                }
            }
            Ok(resp.map(SwiftOrS3::Swift))
        }
    };
    let handler = telemetry::observe(tel, telemetry::Api::Swift, handler);
    let limit = Arc::new(Semaphore::new(cfg.swift.max_concurrent_requests));
    Ok(serve(
        listener,
        handler,
        || {
            SwiftApi::overloaded()
                .map(SwiftOrS3::Swift)
                .map(telemetry::Counted::uncounted)
        },
        limit,
        cfg.limits.clone(),
        stop,
        tls,
    ))
}

/// A Swift-listener response body: Swift's own, or one built with s3s's body type
/// (the login rate limit's answer).
enum SwiftOrS3 {
    Swift(oram_swift::SwiftBody),
    S3(s3s::Body),
}

impl hyper::body::Body for SwiftOrS3 {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        match self.get_mut() {
            SwiftOrS3::Swift(b) => std::pin::Pin::new(b)
                .poll_frame(cx)
                .map(|o| o.map(|r| r.map_err(Into::into))),
            SwiftOrS3::S3(b) => std::pin::Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            SwiftOrS3::Swift(b) => b.is_end_stream(),
            SwiftOrS3::S3(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            SwiftOrS3::Swift(b) => b.size_hint(),
            SwiftOrS3::S3(b) => b.size_hint(),
        }
    }
}
