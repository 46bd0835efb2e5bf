//! `oram-proxy user add|list|remove|rotate`: changes the S3 users of a running
//! proxy through its operator endpoint (`/users`, the endpoint's token), which
//! writes `credentials.toml` and the state database and serves the change at
//! once. A generated secret key is printed once, to standard output; no secret
//! key is printed otherwise.
//!
//! With no proxy answering, nothing is changed: the command says so (with the
//! proxy stopped, `<data_dir>/credentials.toml` may be edited by hand; the next
//! start keeps it in the state database).

use std::path::Path;

use oram_proxy::config::Config;
use oram_proxy::creds;
use zeroize::Zeroizing;

use crate::args::{UserAction, UserArgs};
use crate::cmd::stats::fetch::{call, FetchError, Target};
use crate::cmd::stats::target;
use crate::error::CliError;

/// `oram-proxy user …`.
pub fn run(args: UserArgs) -> Result<(), CliError> {
    let t = endpoint(&args)?;
    let (method, path, body) = request(&args.action)?;
    let (status, answer) =
        call(&t, method, &path, body.as_deref().map(|b| b.as_str())).map_err(|e| match e {
            FetchError::Refused(url) => format!(
                "nothing listens at {url}: users are changed through a running proxy (start it \
                 with an operator endpoint, metrics.listen); with the proxy stopped, edit \
                 <data_dir>/credentials.toml (mode 0600) instead"
            ),
            e => e.to_string(),
        })?;
    let answer = Zeroizing::new(answer);
    let v: serde_json::Value = serde_json::from_str(&answer)
        .map_err(|_| format!("{}{path} answered {status} (not JSON)", t.url))?;
    if !(200..300).contains(&status) {
        return Err(match v["error"].as_str() {
            Some(m) => m.to_string(),
            None => format!("{}{path} answered {status}", t.url),
        }
        .into());
    }
    crate::util::out(&render(&args.action, &v));
    Ok(())
}

/// The endpoint to ask: `--url`, else the configuration's `metrics.listen`; the
/// token and CA files as for `stats`.
fn endpoint(args: &UserArgs) -> Result<Target, String> {
    endpoint_of(&EndpointFlags {
        config: args.config.as_deref(),
        data_dir: args.data_dir.as_deref(),
        url: args.url.as_deref(),
        token_file: args.token_file.as_deref(),
        ca_file: args.ca_file.as_deref(),
    })
}

/// The flags that say where a running proxy's operator endpoint is.
pub(crate) struct EndpointFlags<'a> {
    pub config: Option<&'a Path>,
    pub data_dir: Option<&'a Path>,
    pub url: Option<&'a str>,
    pub token_file: Option<&'a Path>,
    pub ca_file: Option<&'a Path>,
}

/// The endpoint `args` name: `--url`, else the configuration's
/// `metrics.listen`; the token and CA files as for `stats` (a token is
/// required).
pub(crate) fn endpoint_of(args: &EndpointFlags<'_>) -> Result<Target, String> {
    let mut cfg = match args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if let Some(d) = args.data_dir {
        cfg.data_dir = d.to_path_buf();
    }
    creds::apply(&mut cfg)?;
    let found = target(&cfg)?;
    let mut t = match (args.url, found) {
        (Some(url), t) => Target {
            url: url.trim_end_matches('/').to_string(),
            token_file: t.as_ref().and_then(|t| t.token_file.clone()),
            ca_file: t.and_then(|t| t.ca_file),
        },
        (None, Some(t)) => t,
        (None, None) => {
            return Err(
                "no operator endpoint: pass --url (the proxy's --metrics-listen \
                 address), or --config with metrics.listen"
                    .into(),
            )
        }
    };
    if let Some(f) = args.token_file {
        t.token_file = Some(f.to_path_buf());
    }
    if let Some(f) = args.ca_file {
        t.ca_file = Some(f.to_path_buf());
    }
    if t.token_file.is_none() {
        // `--url` with no `metrics.listen` in the configuration: the generated
        // token of the data directory.
        let generated = cfg.data_dir.join("metrics.token");
        t.token_file = generated.exists().then_some(generated);
    }
    if t.token_file.is_none() {
        return Err(format!(
            "no token for {}: pass --token-file, or --data-dir where metrics.token is",
            t.url
        ));
    }
    Ok(t)
}

/// A secret key from a file readable by its owner only (one trailing line
/// break ignored).
fn secret_from(path: &Path) -> Result<Zeroizing<String>, String> {
    oram_volume::fsutil::check_private(path).map_err(|e| e.to_string())?;
    let text = Zeroizing::new(
        std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
    );
    Ok(Zeroizing::new(
        text.trim_end_matches(['\n', '\r']).to_string(),
    ))
}

/// An access key as a path segment: only the characters a changeable user's
/// access key has (the endpoint refuses the rest anyway).
fn segment(ak: &str) -> Result<&str, String> {
    if ak.is_empty()
        || !ak
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(format!(
            "access key {ak:?}: users changed here have access keys of A-Z, a-z, 0-9, '.', '_' \
             and '-' (users of the configuration are changed there)"
        ));
    }
    Ok(ak)
}

/// The request of `action`: method, path and JSON body.
fn request(
    action: &UserAction,
) -> Result<(&'static str, String, Option<Zeroizing<String>>), String> {
    let json = |v: serde_json::Value| Some(Zeroizing::new(v.to_string()));
    Ok(match action {
        UserAction::List => ("GET", "/users".into(), None),
        UserAction::Add {
            access_key,
            secret_key_file,
        } => {
            let mut v = serde_json::json!({});
            if let Some(ak) = access_key {
                v["access_key"] = segment(ak)?.into();
            }
            if let Some(f) = secret_key_file {
                v["secret_key"] = secret_from(f)?.as_str().into();
            }
            ("POST", "/users".into(), json(v))
        }
        UserAction::Remove { access_key, force } => (
            "DELETE",
            format!(
                "/users/{}{}",
                segment(access_key)?,
                if *force { "?force=true" } else { "" }
            ),
            None,
        ),
        UserAction::Rotate {
            access_key,
            secret_key_file,
        } => {
            let mut v = serde_json::json!({});
            if let Some(f) = secret_key_file {
                v["secret_key"] = secret_from(f)?.as_str().into();
            }
            (
                "POST",
                format!("/users/{}/rotate", segment(access_key)?),
                json(v),
            )
        }
    })
}

/// What to print for the endpoint's answer `v` to `action`.
fn render(action: &UserAction, v: &serde_json::Value) -> String {
    let ak = v["access_key"].as_str().unwrap_or("?");
    let secret = v["secret_key"]
        .as_str()
        .map(|s| format!("  secret key: {s}\n  (shown once: it is kept only by the proxy)\n"));
    match action {
        UserAction::List => {
            let mut out = format!("{:<32} SOURCE\n", "ACCESS KEY");
            for u in v["users"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "{:<32} {}\n",
                    u["access_key"].as_str().unwrap_or("?"),
                    u["source"].as_str().unwrap_or("?")
                ));
            }
            out
        }
        UserAction::Add { .. } => format!(
            "added user {ak}\n  access key: {ak}\n{}",
            secret.unwrap_or_default()
        ),
        UserAction::Rotate { .. } => format!(
            "rotated user {ak}: the old secret key no longer works\n{}",
            secret.unwrap_or_default()
        ),
        UserAction::Remove { .. } => {
            let orphaned: Vec<&str> = v["orphaned_buckets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b.as_str())
                .collect();
            let mut out = format!("removed user {ak}\n");
            if !orphaned.is_empty() {
                out.push_str(&format!(
                    "  its buckets stay, owned by {ak} (usable again if {ak} is added back): {}\n",
                    orphaned.join(", ")
                ));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers() {
        let (m, p, b) = request(&UserAction::Remove {
            access_key: "alice".into(),
            force: true,
        })
        .unwrap();
        assert_eq!(
            (m, p.as_str(), b.is_none()),
            ("DELETE", "/users/alice?force=true", true)
        );
        assert!(request(&UserAction::Rotate {
            access_key: "a/b".into(),
            secret_key_file: None
        })
        .is_err());
        // The list shows access keys and sources only.
        let list = render(
            &UserAction::List,
            &serde_json::json!({"users": [{"access_key": "alice", "source": "credentials"}]}),
        );
        assert!(
            list.contains("alice") && list.contains("credentials"),
            "{list}"
        );
        let added = render(
            &UserAction::Add {
                access_key: None,
                secret_key_file: None,
            },
            &serde_json::json!({"access_key": "k1", "secret_key": "s1-secret"}),
        );
        assert!(added.contains("secret key: s1-secret"), "{added}");
    }
}
