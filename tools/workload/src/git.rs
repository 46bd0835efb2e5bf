//! The Git workload (`oram-workload --git`; the thesis "Oblivious RAM in
//! practice" (Thoresen, NTNU 2019), §4.3.2, tables 5.6–5.8): push a generated
//! repository for the first time, clone it, push a new commit, pull it — git with git-remote-s3 through S3, each step timed by
//! `tools/workload/git/gitwl.py`, which also checks every clone byte for byte (git fsck,
//! HEAD, tree, objects). Configurations: the baseline (client → link → MinIO),
//! then per cloud model, block size and engine a proxy, as in the A–E runs. The
//! thesis also ran it through Swift with Dulwich's Swift back-end; that back-end
//! does not serve a push on Python 3 in any release (tools/workload/git/dulwich_swift.py).
//!
//! The orchestration stays here (MinIO, the relays of both models, the proxies,
//! their sizing and local-state figures are the runner's); the git steps are a
//! Python script because git-remote-s3 is a Python package and the e2e test
//! (tests/e2e/test_git.py) uses the same generator and checks.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::{self, Endpoint};
use crate::harness::{Lab, ProxyRun};
use crate::report::{self, Backend, Row, PROVIDERS};
use crate::sizing::{size_engine, sizing_text};
use crate::{config_name, describe, local_state, Args};

/// The four steps' timings of one configuration.
#[derive(Clone, Debug, Default)]
pub struct GitRow {
    /// `baseline`, or the engine (with `@private`).
    pub config: String,
    /// Block size (0 for the baseline).
    pub block_size: u64,
    /// First push, clone, push of a new commit, pull: seconds.
    pub steps: [f64; 4],
    /// Commits and packed bytes of the repository.
    pub commits: u64,
    /// Packed size of the history, bytes.
    pub packed_bytes: u64,
    /// Backend traffic (proxies: from their metrics).
    pub backend: Backend,
    /// The local-state figures (the A–E rows' fields).
    pub local: Row,
    /// What went wrong, if anything.
    pub problems: Vec<String>,
}

/// The steps' names, as in the thesis's tables.
pub const STEPS: [&str; 4] = ["push (first)", "clone", "push (new commit)", "pull"];

fn gitwl_script() -> PathBuf {
    // tools/workload/src/git.rs → tools/workload/git/gitwl.py
    Path::new(env!("CARGO_MANIFEST_DIR")).join("git/gitwl.py")
}

async fn create_bucket(ep: &Endpoint, bucket: &str) -> Result<(), String> {
    api::s3_client(ep)
        .create_bucket()
        .bucket(bucket)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| format!("creating bucket {bucket} at {}: {e}", ep.url))
}

/// Runs gitwl.py against `ep` (its bucket `git`); the row's steps and checks.
fn steps(args: &Args, ep: &Endpoint, work: &Path, row: &mut GitRow) -> Result<(), String> {
    let python = args
        .python
        .clone()
        .unwrap_or_else(|| PathBuf::from("python3"));
    // git-remote-s3 lives beside that interpreter (a venv's bin directory).
    let bin = std::fs::canonicalize(&python)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .or_else(|| python.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let venv_bin = python.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = format!(
        "{}:{}:{}",
        venv_bin.display(),
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let dir = work.join(format!(
        "git-{}-{}",
        row.config.replace('@', "-"),
        row.block_size
    ));
    let out = std::process::Command::new(&python)
        .arg(gitwl_script())
        .args(["run", "--url", "s3://git/repo", "--work"])
        .arg(&dir)
        .args(["--seed", &args.seed.to_string()])
        .args(["--commits", &args.git_commits.to_string()])
        .args(["--mib", &args.git_mib.to_string()])
        .env("PATH", path)
        .env("AWS_ENDPOINT_URL", &ep.url)
        .env("AWS_ACCESS_KEY_ID", &ep.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &ep.secret_key)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", work.join("no-aws-config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            work.join("no-aws-credentials"),
        )
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| {
            format!(
                "gitwl.py failed ({}): {}{}",
                out.status,
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
    let num = |k: &str| -> Result<f64, String> {
        json_field(line, k)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("gitwl.py's answer has no {k}: {line}"))
    };
    row.steps = [
        num("push_s")?,
        num("clone_s")?,
        num("push_commit_s")?,
        num("pull_s")?,
    ];
    row.commits = num("commits")? as u64;
    row.packed_bytes = num("packed_bytes")? as u64;
    if !line.contains("\"problems\": []") {
        row.problems
            .push(format!("the clone did not match: {line}"));
    }
    if !out.status.success() && row.problems.is_empty() {
        row.problems
            .push(format!("gitwl.py exited with {}", out.status));
    }
    Ok(())
}

/// The value of a flat JSON object's field `k` (numbers and strings only).
fn json_field<'a>(json: &'a str, k: &str) -> Option<&'a str> {
    let start = json.find(&format!("\"{k}\": "))? + k.len() + 4;
    let rest = &json[start..];
    let end = rest.find([',', '}'])?;
    Some(rest[..end].trim().trim_matches('"'))
}

/// The Git workload over every configuration; writes `git.md` and `git.csv`.
pub async fn run(
    args: &Args,
    lab: &Lab,
    proxy: &Path,
    engines: &[String],
    models: &[bool],
) -> Result<bool, String> {
    let work = lab.dir.join("git-work");
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let mut rows: Vec<GitRow> = Vec::new();
    // The baseline: git-remote-s3 → link → MinIO.
    let mut base = GitRow {
        config: "baseline".into(),
        ..GitRow::default()
    };
    create_bucket(&lab.direct(), "git").await?;
    eprintln!("git: baseline");
    if let Err(e) = steps(args, &lab.root, &work, &mut base) {
        base.problems.push(e);
    }
    rows.push(base);
    // What a proxy must hold: a few bundles of the whole history (git-remote-s3
    // uploads one per push) and its objects' index.
    let planned: Vec<u64> = vec![(args.git_mib * 2.0 * (1u64 << 20) as f64) as u64; 4];
    for &private in models {
        for &bs in &args.git_block_sizes {
            for engine in engines {
                let config = config_name(engine, private);
                eprintln!("git: {config} {}", report::human(bs));
                let mut row = GitRow {
                    config: config.clone(),
                    block_size: bs,
                    ..GitRow::default()
                };
                let describe = |t: &str| describe::of_engine(proxy, t);
                let params = match size_engine(engine, bs, &planned, args, &describe) {
                    Ok(p) => p,
                    Err(e) => {
                        row.problems.push(e);
                        rows.push(row);
                        continue;
                    }
                };
                let name = format!(
                    "git-{}-{}",
                    config.replace('@', "-"),
                    report::human(bs).to_ascii_lowercase()
                );
                let mut p = match ProxyRun::start(lab, proxy, &name, &params, false, private) {
                    Ok(p) => p,
                    Err(e) => {
                        row.problems.push(format!("proxy did not start: {e}"));
                        rows.push(row);
                        continue;
                    }
                };
                let measured = async {
                    create_bucket(&p.endpoint, "git").await?;
                    let before = p.metrics()?;
                    let cpu0 = p.cpu_seconds();
                    steps(args, &p.endpoint, &work, &mut row)?;
                    let after = p.settle(Duration::from_secs(600))?;
                    row.backend = Backend::from_metrics(&before, &after);
                    row.local.cpu_s = p.cpu_seconds() - cpu0;
                    row.local.peak_rss = p.peak_rss();
                    row.local.rss_end = p.rss();
                    Ok::<(), String>(())
                }
                .await;
                if let Err(e) = measured {
                    row.problems.push(e);
                }
                if let Err(e) = p.stop() {
                    row.problems.push(e);
                }
                row.local.local_bytes = p.local_bytes();
                if let Err(e) = local_state(&mut row.local, &p, proxy) {
                    row.problems.push(e);
                }
                match crate::stored_bytes_then_delete(&lab.direct(), &p.bucket).await {
                    Ok(b) => row.local.remote_bytes = b,
                    Err(e) => row.problems.push(e),
                }
                p.remove_data();
                rows.push(row);
            }
        }
    }
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let w = |f: &str, s: String| {
        std::fs::write(args.out.join(f), s)
            .map_err(|e| format!("{}: {e}", args.out.join(f).display()))
    };
    w("git.csv", csv(&rows))?;
    w("git.md", markdown(args, &rows))?;
    println!("report: {}", args.out.join("git.md").display());
    let mut ok = true;
    for r in &rows {
        for p in &r.problems {
            eprintln!("problem: {} {}: {p}", r.config, report::human(r.block_size));
            ok = false;
        }
    }
    Ok(ok)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// The CSV: one line per configuration.
pub fn csv(rows: &[GitRow]) -> String {
    let base = rows.iter().find(|r| r.config == "baseline");
    let mut s = String::from(
        "config,block_size,commits,packed_bytes,push_s,clone_s,push_commit_s,pull_s,\
         slowdown_push,slowdown_clone,slowdown_push_commit,slowdown_pull,\
         backend_get,backend_put,backend_bytes_down,backend_bytes_up,cost_usd_aws_s3,\
         proxy_cpu_s,proxy_peak_rss_bytes,proxy_rss_end_bytes,oram_bytes,cached_levels,\
         state_live_bytes,state_file_bytes,outsource_ratio,outsource_ratio_with_rss,problems\n",
    );
    for r in rows {
        let sl = |i: usize| base.map_or(f64::NAN, |b| ratio(r.steps[i], b.steps[i]));
        let _ = writeln!(
            s,
            "{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{:.8},{:.2},{},{},{},{},{},{},{:.3},{:.3},{}",
            r.config,
            r.block_size,
            r.commits,
            r.packed_bytes,
            r.steps[0],
            r.steps[1],
            r.steps[2],
            r.steps[3],
            sl(0),
            sl(1),
            sl(2),
            sl(3),
            r.backend.get,
            r.backend.put,
            r.backend.bytes_down,
            r.backend.bytes_up,
            r.backend.cost(&PROVIDERS[0]),
            r.local.cpu_s,
            r.local.peak_rss,
            r.local.rss_end,
            r.local.oram_bytes,
            r.local.cached_levels,
            r.local.state_live_bytes,
            r.local.state_file_bytes,
            r.local.outsource_ratio(),
            r.local.outsource_ratio_with_rss(),
            r.problems.len()
        );
    }
    s
}

/// The Markdown report.
pub fn markdown(args: &Args, rows: &[GitRow]) -> String {
    let base = rows.iter().find(|r| r.config == "baseline");
    let mut s = String::from("# Git workload\n\n");
    let _ = writeln!(
        s,
        "The Git workload of the thesis \"Oblivious RAM in practice\" (§4.3.2): git with git-remote-s3 through S3, a generated \
         repository (seed {}, {} commits, about {} MiB packed). Link: {} ms RTT, {} Mbit/s. Baseline: \
         client → link → MinIO. {}. Engine sizing: {}. Every clone and pull was checked byte for byte \
         (git fsck --full --strict, HEAD, tree, objects). Command: `{}`.\n",
        args.seed,
        args.git_commits,
        args.git_mib,
        args.rtt_ms,
        args.mbit,
        crate::model_text(&args.model),
        sizing_text(args),
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    let _ = writeln!(
        s,
        "| config | block | {} | backend GET / PUT | backend MB down / up | proxy CPU s | peak RSS MB | state MB live / file | outsource ratio (live / + RSS) | problems |",
        STEPS.map(|n| format!("{n} s (slowdown)")).join(" | ")
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let proxy = r.config != "baseline";
        let steps: Vec<String> = (0..4)
            .map(|i| {
                let sl = base.map_or(f64::NAN, |b| ratio(r.steps[i], b.steps[i]));
                format!("{:.2} ({sl:.2}×)", r.steps[i])
            })
            .collect();
        // The proxy's own figures; the baseline has none.
        let proxy_cells = if proxy {
            [
                format!("{} / {}", r.backend.get, r.backend.put),
                format!(
                    "{:.2} / {:.2}",
                    r.backend.bytes_down as f64 / 1e6,
                    r.backend.bytes_up as f64 / 1e6
                ),
                format!("{:.1}", r.local.cpu_s),
                format!("{:.0}", r.local.peak_rss as f64 / 1e6),
                format!(
                    "{:.2} / {:.2}",
                    r.local.state_live_bytes as f64 / 1e6,
                    r.local.state_file_bytes as f64 / 1e6
                ),
                format!(
                    "{:.0}× / {:.0}×",
                    r.local.outsource_ratio(),
                    r.local.outsource_ratio_with_rss()
                ),
            ]
        } else {
            std::array::from_fn(|_| "—".to_string())
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.config,
            report::human(r.block_size),
            steps.join(" | "),
            proxy_cells.join(" | "),
            if r.problems.is_empty() {
                "none".to_string()
            } else {
                r.problems.join("; ")
            }
        );
    }
    if let Some(b) = base {
        let _ = writeln!(
            s,
            "\nRepository: {} commits, {:.2} MB packed.",
            b.commits,
            b.packed_bytes as f64 / 1e6
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitwl_answers_parse() {
        let line = r#"{"url": "s3://git/repo", "commits": 12, "packed_bytes": 4096, "push_s": 1.5, "clone_s": 0.25, "problems": []}"#;
        assert_eq!(json_field(line, "commits"), Some("12"));
        assert_eq!(json_field(line, "clone_s"), Some("0.25"));
        assert_eq!(json_field(line, "url"), Some("s3://git/repo"));
        assert_eq!(json_field(line, "pull_s"), None);
        assert!(gitwl_script().ends_with("git/gitwl.py"));
    }
}
