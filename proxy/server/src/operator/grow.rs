//! `/grow`: the volume's growth, through the endpoint's token
//! (`oram-proxy grow`). Answers are JSON (`{"error": "…"}` on a refusal).
//!
//! * `GET /grow`: what the growth under way or the last one did
//!   ([`crate::grow::GrowStatus`]) with the capacity in effect
//!   (`capacity_blocks`, `block_size`).
//! * `POST /grow` with `{"to_bytes": N}` or `{"to_blocks": N}`: starts growing
//!   the volume to that size (bytes rounded up to whole blocks) in the
//!   background (202, the status); 409 while a growth runs, for a size not
//!   above the capacity in effect, or for an engine that cannot grow.

use http::StatusCode;
use serde::Deserialize;

use super::respond::respond;
use super::users::{body, refusal};
use super::Endpoint;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GrowBody {
    to_bytes: Option<u64>,
    to_blocks: Option<u64>,
}

/// Answers a request for `/grow` (the token already checked).
pub(crate) async fn route(
    ep: &Endpoint,
    req: http::Request<hyper::body::Incoming>,
) -> http::Response<s3s::Body> {
    let growth = &ep.growth;
    match *req.method() {
        http::Method::GET | http::Method::HEAD => {
            respond(StatusCode::OK, "application/json", growth.status_json())
        }
        http::Method::POST => {
            let b: GrowBody = match body(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let started = match (b.to_bytes, b.to_blocks) {
                (Some(n), None) => growth.start_bytes(n, "asked through /grow"),
                (None, Some(n)) => growth.start(n, "asked through /grow"),
                _ => {
                    return refusal(
                        StatusCode::BAD_REQUEST,
                        "give one of to_bytes and to_blocks",
                    )
                }
            };
            match started {
                Ok(()) => respond(
                    StatusCode::ACCEPTED,
                    "application/json",
                    growth.status_json(),
                ),
                Err(e) => refusal(StatusCode::CONFLICT, e),
            }
        }
        _ => respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET or POST /grow\n",
        ),
    }
}
