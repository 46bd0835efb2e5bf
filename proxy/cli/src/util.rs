//! What the commands share: the async runtime, logging, progress bars and
//! dates.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// The multi-threaded runtime a command runs its async work on.
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// Logs to standard error at `default` (or as `RUST_LOG` says).
pub fn logging(default: &str) {
    // s3s's own lines are off unless RUST_LOG names s3s: it logs every client
    // error at error level, with a debug dump of the request; the S3 front logs
    // each refused request once instead (debug for 4xx, warn for 5xx).
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let s3s_named = env.as_deref().is_some_and(|v| v.contains("s3s"));
    let mut filter = tracing_subscriber::EnvFilter::new(env.as_deref().unwrap_or(default));
    if !s3s_named {
        filter = filter.add_directive("s3s=off".parse().expect("valid directive"));
    }
    let filter = filter
        // s3s logs the signature it expected (and the string to sign) at debug level
        // on a mismatch: never, whatever RUST_LOG says.
        .add_directive("s3s::ops::signature=info".parse().expect("valid directive"));
    // Colour only on a terminal: not in the systemd journal or a log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}

/// A progress bar of `len` steps drawn with `template`.
pub fn bar(len: u64, template: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb
}

/// A spinner showing `{spinner} <what>: <step> (<elapsed>)`, ticking until
/// finished.
pub fn spinner(what: &str) -> ProgressBar {
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template(&format!("{{spinner}} {what}: {{msg}} ({{elapsed}})"))
            .expect("valid template"),
    );
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner
}

/// `YYYY-MM-DD HH:MM:SS UTC` for seconds since the Unix epoch.
pub fn utc(secs: u64) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_else(|| format!("{secs} s after the Unix epoch"))
}

/// Writes `text` to standard output. A reader that went away (`oram-proxy stats |
/// head -1`) ends the process quietly with status 0, as SIGPIPE would have (Rust
/// ignores SIGPIPE, and `println!` panics on a closed pipe); another write error
/// ends it with status 1 and a message.
pub fn out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("oram-proxy: cannot write to standard output: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_read_as_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
        assert_eq!(utc(4_102_444_800), "2100-01-01 00:00:00 UTC");
    }
}
