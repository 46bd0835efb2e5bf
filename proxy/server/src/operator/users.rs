//! `/users`: the S3 users, changed while serving (`oram-proxy user …`). Every
//! route needs the endpoint's token; bodies are JSON of at most
//! [`MAX_BODY`] bytes; answers are JSON (`{"error": "…"}` on a refusal).
//!
//! * `GET /users`: `{"users": [{"access_key", "source"}]}` — access keys and
//!   where each is defined (`environment`, `config`, `credentials`), never a
//!   secret key.
//! * `POST /users` with `{"access_key"?, "secret_key"?}`: adds a user (201); a
//!   generated secret key is in the answer, once (a given one is not echoed).
//! * `POST /users/<access key>/rotate` with `{"secret_key"?}` (or no body):
//!   a new secret key; the old one stops working.
//! * `DELETE /users/<access key>[?force=true]`: removes a user (see
//!   [`oram_volume::users::UserDirectory`] for what is refused).
//!
//! A change is written (`credentials.toml`, the state database) before the S3
//! and Swift listeners serve it; requests authenticated before it finish. Logs
//! name the access key and the change, never a secret.

use http::StatusCode;
use http_body_util::{BodyExt, Limited};
use oram_objects::ObjectLayer;
use oram_s3::{S3User, UserMap};
use oram_swift::SwiftApi;
use oram_volume::users::{SourcedUser, UserChange, UserDirectory, UserError};
use oram_volume::{UserConfig, Volume, VolumeError};
use serde::Deserialize;
use zeroize::Zeroizing;

use super::respond::respond;
use crate::config::ServerConfig;

/// The largest request body `/users` reads.
pub(crate) const MAX_BODY: usize = 4096;

/// The users served and where changes go.
pub struct LiveUsers {
    /// The users, and the lock that serialises changes.
    pub dir: UserDirectory,
    /// The users the S3 listener checks signatures with.
    pub s3: UserMap,
    /// The Swift API, when its listener is on.
    pub swift: Option<SwiftApi>,
    /// The configuration (its `[[swift.users]]` name S3 users as accounts).
    pub cfg: ServerConfig,
}

impl LiveUsers {
    /// Serves `users` on the S3 and Swift listeners.
    fn publish(&self, users: &[UserConfig]) {
        self.s3.replace(&s3_users(users));
        if let Some(api) = &self.swift {
            match crate::swift::users(&self.cfg, users) {
                Ok(u) => api.set_users(u),
                // Not reached: a removal that would leave a Swift user without its
                // account is refused first.
                Err(e) => tracing::error!("swift users not replaced: {e}"),
            }
        }
    }
}

/// `users` as the S3 front-end takes them.
pub(crate) fn s3_users(users: &[UserConfig]) -> Vec<S3User> {
    users
        .iter()
        .map(|u| S3User {
            access_key: u.access_key.clone(),
            secret_key: u.secret_key.clone(),
        })
        .collect()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AddBody {
    access_key: Option<String>,
    secret_key: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RotateBody {
    secret_key: Option<String>,
}

fn json_answer(status: StatusCode, v: serde_json::Value) -> http::Response<s3s::Body> {
    respond(status, "application/json", format!("{v}\n"))
}

pub(crate) fn refusal(
    status: StatusCode,
    message: impl std::fmt::Display,
) -> http::Response<s3s::Body> {
    json_answer(status, serde_json::json!({ "error": message.to_string() }))
}

/// The list `GET /users` answers: access keys and sources only.
pub(crate) fn list_json(users: &[SourcedUser]) -> serde_json::Value {
    let users: Vec<serde_json::Value> = users
        .iter()
        .map(|u| serde_json::json!({ "access_key": u.user.access_key, "source": u.source.name() }))
        .collect();
    serde_json::json!({ "users": users })
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes (none: the default).
pub(crate) async fn body<T: serde::de::DeserializeOwned + Default>(
    req: http::Request<hyper::body::Incoming>,
) -> Result<T, http::Response<s3s::Body>> {
    let bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => Zeroizing::new(b.to_bytes().to_vec()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than {MAX_BODY} bytes"),
            ))
        }
        Err(e) => return Err(refusal(StatusCode::BAD_REQUEST, e)),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    // serde_json's message names the field and position, never a value.
    serde_json::from_slice(&bytes)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, format!("the body: {e}")))
}

/// The status a refused change answers.
fn status_of(e: &UserError) -> StatusCode {
    match e {
        UserError::Invalid(_) => StatusCode::BAD_REQUEST,
        UserError::NotFound(_) => StatusCode::NOT_FOUND,
        UserError::Exists(_)
        | UserError::Fixed { .. }
        | UserError::LastUser(_)
        | UserError::OwnsBuckets { .. } => StatusCode::CONFLICT,
        UserError::Volume(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The names of the buckets `owner` owns.
fn buckets_of(layer: &ObjectLayer, owner: &str) -> Result<Vec<String>, VolumeError> {
    Ok(layer
        .list_buckets(owner)
        .map_err(|e| VolumeError::Config(format!("listing {owner:?}'s buckets: {e}")))?
        .into_iter()
        .map(|b| b.name)
        .collect())
}

/// Serves `path` (`/users` or below it); the caller has checked the token.
pub(crate) async fn route(
    users: &LiveUsers,
    vol: &Volume,
    path: &str,
    req: http::Request<hyper::body::Incoming>,
) -> http::Response<s3s::Body> {
    use http::Method;
    let rest = path.strip_prefix("/users").unwrap_or("");
    let query = req.uri().query().unwrap_or("").to_string();
    let method = req.method().clone();
    let (change, verb) = match (&method, rest.trim_end_matches('/')) {
        (&Method::GET, "") => {
            return json_answer(StatusCode::OK, list_json(&users.dir.served().await))
        }
        (&Method::POST, "") => match body::<AddBody>(req).await {
            Ok(b) => (
                UserChange::Add {
                    access_key: b.access_key,
                    secret_key: b.secret_key.map(Zeroizing::new),
                },
                "added",
            ),
            Err(r) => return r,
        },
        (&Method::POST, r) if r.ends_with("/rotate") && r.matches('/').count() == 2 => {
            let access_key = r[1..r.len() - "/rotate".len()].to_string();
            match body::<RotateBody>(req).await {
                Ok(b) => (
                    UserChange::Rotate {
                        access_key,
                        secret_key: b.secret_key.map(Zeroizing::new),
                    },
                    "rotated",
                ),
                Err(r) => return r,
            }
        }
        (&Method::DELETE, r) if r.matches('/').count() == 1 && r.len() > 1 => {
            let access_key = r[1..].to_string();
            let force = form_urlencoded::parse(query.as_bytes())
                .any(|(k, v)| k == "force" && (v == "true" || v == "1"));
            let swift_users: Vec<String> = users
                .cfg
                .swift
                .users
                .iter()
                .filter(|u| u.account == access_key)
                .map(|u| format!("{}:{}", u.account, u.user))
                .collect();
            if !swift_users.is_empty() {
                return refusal(
                    StatusCode::CONFLICT,
                    format!(
                        "user {access_key:?} is the account of the Swift users {} \
                         ([[swift.users]] in the configuration): remove them there first",
                        swift_users.join(", ")
                    ),
                );
            }
            (UserChange::Remove { access_key, force }, "removed")
        }
        _ => {
            return refusal(
                StatusCode::NOT_FOUND,
                "GET /users, POST /users, POST /users/<access key>/rotate, \
                 DELETE /users/<access key>[?force=true]",
            )
        }
    };
    let layer = vol.layer.clone();
    let owned = move |owner: &str| buckets_of(&layer, owner);
    let publish = |u: &[UserConfig]| users.publish(u);
    match users.dir.apply(&vol.db, change, &owned, &publish).await {
        Ok(done) => {
            tracing::info!(
                access_key = %done.access_key,
                orphaned_buckets = done.orphaned_buckets.len(),
                "S3 user {verb}"
            );
            let mut v = serde_json::json!({ "access_key": done.access_key, "change": verb });
            if let Some(s) = &done.generated_secret {
                v["secret_key"] = serde_json::Value::String(s.to_string());
            }
            if verb == "removed" {
                v["orphaned_buckets"] = serde_json::json!(done.orphaned_buckets);
            }
            let status = if verb == "added" {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            json_answer(status, v)
        }
        Err(e) => {
            let status = status_of(&e);
            if status.is_server_error() {
                tracing::error!("S3 user change failed: {e}");
            } else {
                tracing::info!("S3 user change refused: {e}");
            }
            refusal(status, e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oram_volume::users::UserSource;

    #[test]
    fn the_list_never_holds_a_secret() {
        let users = [
            SourcedUser {
                user: UserConfig {
                    access_key: "admin".into(),
                    secret_key: "admin-secret-0001".into(),
                },
                source: UserSource::Config,
            },
            SourcedUser {
                user: UserConfig {
                    access_key: "alice".into(),
                    secret_key: "alice-secret-0002".into(),
                },
                source: UserSource::Credentials,
            },
        ];
        let text = list_json(&users).to_string();
        assert_eq!(
            text,
            r#"{"users":[{"access_key":"admin","source":"config"},{"access_key":"alice","source":"credentials"}]}"#
        );
        assert!(!format!("{users:?}").contains("secret-000"));
    }
}
