//! How a command ends: the one map from errors to exit codes.

use std::process::ExitCode;

/// Why a command did not succeed.
#[derive(Debug)]
pub enum CliError {
    /// It failed (the message says why): exit status 1.
    Failed(String),
    /// `fsck` could not run (the message says why): exit status 2.
    CheckNotRun(String),
    /// `fsck` ran and found problems (it printed them): exit status 1.
    ProblemsFound,
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        Self::Failed(message)
    }
}

/// The exit status of a command named `name` (`None`: `serve` and `init`, whose
/// messages start with just `oram-proxy:`) that ended with `result`; a
/// message goes to standard error.
pub fn exit(name: Option<&str>, result: Result<(), CliError>) -> ExitCode {
    let say = |message: &str| match name {
        Some(n) => eprintln!("oram-proxy {n}: {message}"),
        None => eprintln!("oram-proxy: {message}"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::ProblemsFound) => ExitCode::from(1),
        Err(CliError::Failed(m)) => {
            say(&m);
            ExitCode::FAILURE
        }
        Err(CliError::CheckNotRun(m)) => {
            say(&m);
            ExitCode::from(2)
        }
    }
}
