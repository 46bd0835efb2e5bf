//! The Swift listener: its users (the S3 users' accounts, plus `[[swift.users]]`)
//! and the handler the accept loop serves (it hands the front-end the client's
//! address, for its login throttle). It runs on its
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
use crate::serve::{serve, PeerAddr, ServedBody};
use crate::tasks::Shutdown;
use crate::telemetry::{self, Telemetry};
use crate::tls::Tls;
use crate::ServeError;

/// The Swift users: a Swift account is an S3 access key, `<key>:<key>` with the
/// secret administers it; `[[swift.users]]` adds users to those accounts.
pub(crate) fn users(
    cfg: &ServerConfig,
    s3_users: &[UserConfig],
) -> Result<Vec<SwiftUser>, ServeError> {
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

/// The Swift listener's serving task on `listener`, until `stop`, and the API
/// it serves (to replace its users while serving).
pub(crate) fn listener_task(
    cfg: &ServerConfig,
    listener: TcpListener,
    layer: ObjectLayer,
    s3_users: &[UserConfig],
    tel: Arc<Telemetry>,
    tls: Option<Arc<Tls>>,
    stop: Shutdown,
) -> Result<
    (
        impl std::future::Future<Output = ()> + Send + 'static,
        SwiftApi,
    ),
    ServeError,
> {
    let api = SwiftApi::new(
        layer,
        users(cfg, s3_users)?,
        oram_swift::SwiftConfig {
            token_ttl: Duration::from_secs(cfg.swift.token_ttl_secs),
            https: tls.is_some(),
        },
    );
    let handle = api.clone();
    // The client address for the login throttle (oram_swift::ClientAddr).
    let handler = move |mut req: http::Request<telemetry::Counted<ServedBody>>| {
        let api = api.clone();
        async move {
            if let Some(peer) = req.extensions().get::<PeerAddr>().map(|p| p.0.ip()) {
                req.extensions_mut().insert(oram_swift::ClientAddr(peer));
            }
            Ok::<_, std::convert::Infallible>(api.handle(req).await)
        }
    };
    let handler = telemetry::observe(tel, telemetry::Api::Swift, cfg.log.access, handler);
    let limit = Arc::new(Semaphore::new(cfg.swift.max_concurrent_requests));
    let serving = serve(
        listener,
        handler,
        || SwiftApi::overloaded().map(telemetry::Counted::uncounted),
        limit,
        cfg.limits.clone(),
        stop,
        tls,
        true,
    );
    Ok((serving, handle))
}
