//! `oram-proxy stats`: a running proxy's state from its operator endpoint
//! (`/metrics`, [`fetch`]), summarised ([`report`]); with no proxy running, what
//! the data directory itself knows (volume parameters, checkpoint, stash,
//! journal, file sizes). Both name the Swift containers S3 cannot address,
//! with the reason (a running proxy from `/buckets/invisible`).

pub(crate) mod fetch;
mod report;

use oram_proxy::config::Config;
use oram_server::tls;

use crate::args::StatsArgs;
use crate::error::CliError;
use fetch::{fetch, fetch_metrics, FetchError, Target};
use report::{history_report, invisible_line, live_report, offline_report, parse_metrics};

/// `oram-proxy stats`.
pub fn run(args: StatsArgs) -> Result<(), CliError> {
    let (cfg, _) = args.configure()?;
    let target = match (args.url, target(&cfg)?) {
        (Some(url), t) => Some(Target {
            url,
            token_file: t.as_ref().and_then(|t| t.token_file.clone()),
            ca_file: t.and_then(|t| t.ca_file),
        }),
        (None, t) => t,
    }
    .map(|mut t| {
        if args.token_file.is_some() {
            t.token_file = args.token_file.clone();
        }
        if args.ca_file.is_some() {
            t.ca_file = args.ca_file.clone();
        }
        t
    });
    let print = |title: String, lines: Vec<(&str, String)>| {
        let mut text = format!("{title}\n");
        for (k, v) in lines {
            text.push_str(&format!("  {:<14} {v}\n", format!("{k}:")));
        }
        crate::util::out(&text);
    };
    if let Some(t) = &target {
        match fetch_metrics(t) {
            Ok(text) => {
                let m = parse_metrics(&text);
                print(
                    format!("oram-proxy stats (running proxy, {})", t.url),
                    live_report(&m),
                );
                match fetch(t, "/buckets/invisible") {
                    Ok(json) => crate::util::out(&invisible_report(&json)?),
                    // A proxy of an earlier version does not list them.
                    Err(FetchError::NotFound(_)) => {}
                    Err(e) => return Err(e.to_string().into()),
                }
                match fetch(t, "/grow") {
                    Ok(json) => crate::util::out(&history_report(&live_history(&json)?)),
                    // A proxy of an earlier version does not grow.
                    Err(FetchError::NotFound(_)) => {}
                    Err(e) => return Err(e.to_string().into()),
                }
                return Ok(());
            }
            Err(FetchError::Refused(_)) => {}
            Err(e) => return Err(e.to_string().into()),
        }
    }
    let lines = offline_report(&cfg).map_err(|e| match &target {
        None => format!(
            "{e} (to ask a running proxy, give it an operator endpoint with --metrics-listen \
             and pass --url)"
        ),
        Some(_) => e.to_string(),
    })?;
    let history = oram_volume::read_history(&cfg.data_dir).map_err(|e| e.to_string())?;
    print(
        format!(
            "oram-proxy stats (data directory {}; no proxy running{})",
            cfg.data_dir.display(),
            target
                .as_ref()
                .map_or(String::new(), |t| format!(" at {}", t.url))
        ),
        lines,
    );
    crate::util::out(&history_report(&history));
    Ok(())
}

/// The growth history in `GET /grow`'s answer (none from a proxy of an
/// earlier version, which does not report it).
fn live_history(json: &str) -> Result<Vec<oram_volume::GrowthRecord>, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("/grow: {e}"))?;
    match v.get("history") {
        None => Ok(Vec::new()),
        Some(h) => serde_json::from_value(h.clone()).map_err(|e| format!("/grow: {e}")),
    }
}

/// The lines naming the Swift containers S3 cannot address, from the JSON of
/// `/buckets/invisible` (nothing when there are none).
fn invisible_report(json: &str) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Invisible {
        account: String,
        container: String,
        reason: String,
    }
    let list: Vec<Invisible> =
        serde_json::from_str(json).map_err(|e| format!("/buckets/invisible: {e}"))?;
    if list.is_empty() {
        return Ok(String::new());
    }
    let mut text = format!(
        "{} Swift container(s) invisible to S3 (ListBuckets leaves them out):\n",
        list.len()
    );
    for c in list {
        text.push_str(&format!(
            "  {}\n",
            invisible_line(&c.account, &c.container, &c.reason)
        ));
    }
    Ok(text)
}

/// The endpoint the configuration describes (`None` when `metrics.listen` is
/// empty): `127.0.0.1` for a wildcard address; HTTPS when the endpoint is off
/// loopback and TLS is configured; the token and CA files of the data directory
/// when present.
pub fn target(cfg: &Config) -> Result<Option<Target>, String> {
    if cfg.metrics.listen.is_empty() {
        return Ok(None);
    }
    let mut addr: std::net::SocketAddr = cfg
        .metrics
        .listen
        .parse()
        .map_err(|_| "configuration: metrics.listen is not HOST:PORT".to_string())?;
    let https = !tls::is_loopback(&addr)
        && tls::files(&cfg.tls, &cfg.data_dir)
            .map_err(|e| e.to_string())?
            .is_some();
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let generated = cfg.data_dir.join("metrics.token");
    let ca = tls::default_dir(&cfg.data_dir).join("ca.pem");
    Ok(Some(Target {
        url: format!("{}://{addr}", if https { "https" } else { "http" }),
        token_file: cfg
            .metrics
            .token_file
            .clone()
            .or_else(|| generated.exists().then_some(generated)),
        ca_file: ca.exists().then_some(ca),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_follow_the_configuration() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            data_dir: d.path().to_path_buf(),
            ..Config::default()
        };
        assert!(target(&cfg).unwrap().is_none());
        cfg.metrics.listen = "0.0.0.0:9100".into();
        let t = target(&cfg).unwrap().unwrap();
        assert_eq!(t.url, "http://127.0.0.1:9100");
        assert!(t.token_file.is_none());
        tls::generate_self_signed(&tls::default_dir(d.path()), &["localhost".into()]).unwrap();
        std::fs::write(d.path().join("metrics.token"), "x").unwrap();
        let t = target(&cfg).unwrap().unwrap();
        assert_eq!(t.url, "https://127.0.0.1:9100");
        assert_eq!(t.token_file, Some(d.path().join("metrics.token")));
        assert_eq!(t.ca_file, Some(d.path().join("tls/ca.pem")));
        assert!(matches!(
            fetch_metrics(&Target {
                url: format!("http://127.0.0.1:{}", free_port()),
                token_file: None,
                ca_file: None
            }),
            Err(FetchError::Refused(_))
        ));
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}
