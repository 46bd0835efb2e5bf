//! `oram-proxy`: an S3- and Swift-compatible proxy that keeps its objects in an
//! Oblivious RAM. This file parses the command line, runs the command (one
//! module each under `cmd/`) and maps how it ended to an exit status
//! ([`error::exit`]).

mod args;
mod cmd;
mod error;
mod util;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    // Before anything else (and before any thread exists): the key and passphrase
    // leave the environment, where /proc/<pid>/environ and child processes see them.
    oram_volume::key::take_env_secrets();
    let (name, result) = match Cli::parse().command {
        Command::Serve(a) => (None, cmd::serve::run(a)),
        Command::Init(a) => (None, cmd::init::run(a)),
        Command::Fsck(a) => (Some("fsck"), cmd::fsck::run(a)),
        Command::Recover(a) => (Some("recover"), cmd::recover::run(a)),
        Command::Stats(a) => (Some("stats"), cmd::stats::run(a)),
        Command::User(a) => (Some("user"), cmd::user::run(a)),
        Command::Grow(a) => (Some("grow"), cmd::grow::run(a)),
        Command::Compact(a) => (Some("compact"), cmd::compact::run(a)),
        Command::Format(a) => (Some("format"), cmd::format::run(a)),
        Command::Describe(a) => (Some("describe"), cmd::describe::run(a)),
        Command::Key(a) => (Some("key"), cmd::key::run(a)),
        Command::Cluster(a) => (Some("cluster"), cmd::cluster::run(a)),
        Command::ExampleConfig => {
            util::out(&oram_proxy::example::example());
            (None, Ok(()))
        }
    };
    error::exit(name, result)
}
