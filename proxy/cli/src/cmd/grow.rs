//! `oram-proxy grow --to SIZE`: grows a running proxy's volume, online, through
//! its operator endpoint (`POST /grow`, the endpoint's token), and follows the
//! growth (`GET /grow`) until it is done, with progress; `--no-wait` returns
//! once it started. The proxy keeps serving meanwhile. With no proxy answering
//! nothing changes: the command says so (a stopped volume grows at its next
//! start, with this command or `[volume] grow_at`).

use std::time::Duration;

use crate::args::GrowArgs;
use crate::cmd::stats::fetch::{call, fetch, FetchError, Target};
use crate::cmd::user::{endpoint_of, EndpointFlags};
use crate::error::CliError;
use crate::util::bar;

/// How often the growth's progress is asked for.
const POLL: Duration = Duration::from_millis(300);

/// `oram-proxy grow`.
pub fn run(args: GrowArgs) -> Result<(), CliError> {
    let to = oram_volume::parse_size(&args.to)?;
    let t = endpoint_of(&EndpointFlags {
        config: args.config.as_deref(),
        data_dir: args.data_dir.as_deref(),
        url: args.url.as_deref(),
        token_file: args.token_file.as_deref(),
        ca_file: args.ca_file.as_deref(),
    })?;
    let body = serde_json::json!({ "to_bytes": to }).to_string();
    let (status, answer) = call(&t, "POST", "/grow", Some(&body)).map_err(|e| match e {
        FetchError::Refused(url) => format!(
            "nothing listens at {url}: a volume grows through its running proxy (start it with \
             an operator endpoint, metrics.listen)"
        ),
        e => e.to_string(),
    })?;
    let v = json(&t, &answer, status)?;
    if status == 404 {
        return Err(format!(
            "{}/grow was not found: the proxy is of an earlier version",
            t.url
        )
        .into());
    }
    if status != 202 {
        return Err(match v["error"].as_str() {
            Some(m) => m.to_string(),
            None => format!("{}/grow answered {status}", t.url),
        }
        .into());
    }
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    let bs = n(&v, "block_size").max(1);
    println!(
        "growing the volume ({} engine) from {} to {} ({} blocks of {bs} bytes)",
        v["engine"].as_str().unwrap_or("?"),
        size(n(&v, "from_blocks") * bs),
        size(n(&v, "to_blocks") * bs),
        n(&v, "to_blocks"),
    );
    if args.no_wait {
        println!("  under way in the background: `oram-proxy grow` again or `stats` shows it");
        return Ok(());
    }
    let (finished, failed) = (n(&v, "finished"), n(&v, "failed"));
    // Progress over the objects the growth writes (a tree's new buckets), or
    // over the partitions of an engine whose growth writes nothing.
    let pb = bar(0, "grow     [{bar:40}] {pos}/{len} ({eta})");
    let mut last = (u64::MAX, 0);
    let out = loop {
        std::thread::sleep(POLL);
        let text = match fetch(&t, "/grow") {
            Ok(text) => text,
            Err(e) => {
                break Err(format!(
                    "{e}: the proxy stopped answering; a growth it did not finish goes on at \
                     its next start"
                ))
            }
        };
        let s = json(&t, &text, 200)?;
        let (done, total) = (n(&s, "done"), n(&s, "total"));
        pb.set_length(total);
        pb.set_position(done);
        if pb.is_hidden() && (done, total) != last && total > 0 {
            println!("  {done}/{total} done");
            last = (done, total);
        }
        if s["running"].as_bool() == Some(true) {
            continue;
        }
        if n(&s, "failed") > failed {
            break Err(s["error"]
                .as_str()
                .unwrap_or("the growth failed")
                .to_string());
        }
        if n(&s, "finished") > finished {
            break Ok(s);
        }
        break Err(
            "the growth stopped (the proxy is stopping): it goes on at its next start".into(),
        );
    };
    pb.finish_and_clear();
    let s = out?;
    println!(
        "the volume grew: {} ({} blocks)",
        size(n(&s, "capacity_blocks") * bs),
        n(&s, "capacity_blocks")
    );
    Ok(())
}

fn json(t: &Target, text: &str, status: u16) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|_| format!("{}/grow answered {status} (not JSON)", t.url))
}

/// `bytes` in binary units.
fn size(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v} {}", units[u])
    } else {
        format!("{v:.1} {}", units[u])
    }
}
