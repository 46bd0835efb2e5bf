//! The dashboard: a page on the operator endpoint that shows, live and side by
//! side, what the clients ask for and what the cloud sees — the backend request
//! stream (positions, sizes, timing) and the distribution of accesses over
//! positions — so that an operator can watch a hot object turn into uniform noise
//! (Path and Ring ORAM) or stay a spike (`direct`).
//!
//! Plain HTML, CSS and JavaScript compiled into the binary (no build step, no
//! external resources; a strict Content-Security-Policy). The page polls
//! `/dashboard/data?b=<n>&c=<n>`, which returns the backend and client requests
//! numbered `b` and `c` onwards from the two bounded windows
//! ([`crate::tap`], [`crate::telemetry`]), a summary, and the capacity with the
//! growths (`GET /grow`'s answer), as JSON. The static files
//! need no token; the data does (see [`super`]); the page takes the token
//! from its URL fragment (`/dashboard#token=...`), which browsers never send.
//!
//! Positions: a tree node `i` (Path and Ring ORAM) is drawn at its place within
//! its level, `(i - 2^level) / 2^level`, so that every level spans the same axis;
//! a block of `direct` at `block / capacity`; an object on the client side at a
//! keyed hash of its name.

use std::fmt::Write as _;
use std::sync::Arc;

use super::endpoint::Endpoint;
use super::respond::dashboard_response;
use crate::tap::{verb_name, Place};
use crate::telemetry::unix_ms;

const INDEX: &str = include_str!("dashboard/index.html");
const APP_JS: &str = include_str!("dashboard/app.js");
const APP_CSS: &str = include_str!("dashboard/app.css");

/// Events returned per poll and side, at most.
const MAX_EVENTS: usize = 4000;

/// Answers a `/dashboard...` path, or `None` for an unknown one. The data is
/// built off the async workers (it copies up to two windows of events).
pub async fn route(
    ep: &Arc<Endpoint>,
    path: &str,
    query: Option<&str>,
) -> Option<http::Response<s3s::Body>> {
    Some(match path {
        "/dashboard" | "/dashboard/" => dashboard_response("text/html; charset=utf-8", INDEX),
        "/dashboard/app.js" => dashboard_response("text/javascript; charset=utf-8", APP_JS),
        "/dashboard/app.css" => dashboard_response("text/css; charset=utf-8", APP_CSS),
        "/dashboard/data" => {
            let q = |name: &str| -> u64 {
                query
                    .unwrap_or("")
                    .split('&')
                    .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            let (b, c, ep) = (q("b"), q("c"), ep.clone());
            let json = tokio::task::spawn_blocking(move || data(&ep, b, c))
                .await
                .ok()?;
            dashboard_response("application/json", json)
        }
        _ => return None,
    })
}

/// A JSON string literal.
pub(crate) fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '<' | '>' | '&' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The place of a backend object on the dashboard's axis, and its tree level.
fn axis(place: Place, capacity: u64) -> Option<(f64, i32)> {
    match place {
        Place::Node(0) | Place::Other => None,
        Place::Node(i) => {
            let level = 63 - i.leading_zeros() as i32;
            let base = 1u64 << level;
            Some(((i - base) as f64 / base as f64, level))
        }
        Place::Block(b) => Some((b as f64 / capacity.max(1) as f64, -1)),
    }
}

/// The JSON of `/dashboard/data` (see the module doc).
pub fn data(ep: &Endpoint, since_backend: u64, since_client: u64) -> String {
    let vol = &ep.vol;
    let tel = &ep.tel;
    let usage = vol.layer.usage();
    let e = vol.engine.stats();
    let b = vol.backend_counters.snapshot();
    let (cin_s3, cout_s3) = tel.client_bytes(crate::telemetry::Api::S3);
    let (cin_sw, cout_sw) = tel.client_bytes(crate::telemetry::Api::Swift);
    let client_bytes = cin_s3 + cout_s3 + cin_sw + cout_sw;
    let last_ok = tel
        .checkpoint
        .last_ok_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    let since = if last_ok == 0 {
        tel.started_unix * 1000
    } else {
        last_ok
    };
    let layout = if ep.info.engine == "direct" {
        "blocks"
    } else {
        "tree"
    };
    let mut o = String::with_capacity(64 * 1024);
    o.push_str("{\"engine\":");
    json_str(&mut o, &ep.info.engine);
    let _ = write!(
        o,
        ",\"layout\":\"{layout}\",\"capacity_blocks\":{},\"used_blocks\":{},\"block_size\":{}",
        usage.capacity_blocks,
        usage.capacity_blocks.saturating_sub(usage.free_blocks),
        usage.block_size
    );
    // How full it is, and the growths: GET /grow's answer.
    let _ = write!(
        o,
        ",\"free_blocks\":{},\"growth\":{}",
        usage.free_blocks,
        ep.growth.status_json()
    );
    let _ = write!(
        o,
        ",\"summary\":{{\"uptime_s\":{:.1},\"client_requests\":{},\"client_bytes\":{},\
         \"backend_requests\":{},\"backend_bytes\":{},\"stash\":{},\"stash_max\":{},\
         \"stash_bound\":{},\"pending_writebacks\":{},\"checkpoint_age_s\":{:.1}}}",
        tel.uptime().as_secs_f64(),
        tel.requests_total(),
        client_bytes,
        b.total_requests(),
        b.total_bytes(),
        e.stash_len,
        e.stash_max,
        ep.info.stash_bound,
        e.pending_writebacks,
        unix_ms().saturating_sub(since) as f64 / 1e3,
    );
    let (first, next, events) = ep.tap.since(since_backend, MAX_EVENTS);
    let _ = write!(
        o,
        ",\"backend\":{{\"first\":{first},\"next\":{next},\"now_ms\":{:.1},\"events\":[",
        ep.tap.now_ms()
    );
    for (i, ev) in events.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let (x, level) = match axis(ev.place, usage.capacity_blocks) {
            Some((x, l)) => (format!("{x:.6}"), l),
            None => ("null".into(), -1),
        };
        let _ = write!(
            o,
            "[{:.1},\"{}\",{x},{level},{},{:.2},{}]",
            ev.t_ms,
            verb_name(ev.verb),
            ev.size,
            ev.dur_ms,
            u8::from(ev.ok)
        );
    }
    let (first, next, events) = tel.clients_since(since_client, MAX_EVENTS);
    let _ = write!(
        o,
        "]}},\"client\":{{\"first\":{first},\"next\":{next},\"now_ms\":{:.1},\"events\":[",
        tel.ms_since_start(std::time::Instant::now())
    );
    for (i, ev) in events.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let x = ev.x.map_or("null".to_string(), |x| format!("{x:.6}"));
        let _ = write!(
            o,
            "[{:.1},\"{}\",\"{}\",{x},",
            ev.t_ms,
            ev.api.name(),
            ev.op
        );
        match &ev.label {
            Some(l) => json_str(&mut o, l),
            None => o.push_str("null"),
        }
        let _ = write!(
            o,
            ",{},{},{},{:.2}]",
            u8::from(ev.read),
            ev.status,
            ev.size,
            ev.dur_ms
        );
    }
    o.push_str("]}}");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped_for_any_object_name() {
        let mut o = String::new();
        json_str(&mut o, "a\"b\\c\n<script>&\u{1}\u{2028}é");
        assert_eq!(
            o,
            "\"a\\\"b\\\\c\\u000a\\u003cscript\\u003e\\u0026\\u0001\\u2028é\""
        );
    }

    #[test]
    fn tree_nodes_spread_over_their_level() {
        assert_eq!(axis(Place::Node(1), 8), Some((0.0, 0)));
        assert_eq!(axis(Place::Node(2), 8), Some((0.0, 1)));
        assert_eq!(axis(Place::Node(3), 8), Some((0.5, 1)));
        assert_eq!(axis(Place::Node(7), 8), Some((0.75, 2)));
        assert_eq!(axis(Place::Block(2), 8), Some((0.25, -1)));
        assert_eq!(axis(Place::Other, 8), None);
        assert_eq!(axis(Place::Node(0), 8), None);
    }
}
