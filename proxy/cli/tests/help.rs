//! Each command's `--help` lists the flags that matter to it: the listeners',
//! TLS and server flags only on `serve` (and the listen addresses on `init`, which
//! names its certificate after them), the volume's on the commands that open it.

use std::process::Command;

/// `oram-proxy <args>`'s standard output; the command must succeed.
fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_oram-proxy"))
        .args(args)
        .output()
        .expect("oram-proxy runs");
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// Whether the help text lists `flag` as an option (not merely mentions it).
fn lists(text: &str, flag: &str) -> bool {
    text.lines()
        .any(|l| l.trim_start().starts_with(&format!("{flag} ")) || l.trim() == flag)
}

const SERVE_ONLY: [&str; 6] = [
    "--tls-cert",
    "--tls-key",
    "--allow-plain-http",
    "--checkpoint-interval",
    "--access-log",
    "--s3-listen",
];
const VOLUME: [&str; 7] = [
    "--engine",
    "--block-size",
    "--capacity-blocks",
    "--backend",
    "--backend-endpoint",
    "--key-file",
    "--passphrase-file",
];
const RECOVER_ONLY: [&str; 3] = ["--volume-id", "--accept-log-gap", "--expect-record"];

#[test]
fn every_command_lists_only_its_own_flags() {
    let commands = [
        "serve", "init", "fsck", "recover", "stats", "compact", "format", "describe",
    ];
    for cmd in commands {
        let text = help(&[cmd, "--help"]);
        for flag in ["--config", "--data-dir"] {
            assert!(lists(&text, flag), "{cmd} --help lacks {flag}:\n{text}");
        }
        let serve_only = |flag: &str| match cmd {
            "serve" => true,
            "init" => flag == "--s3-listen",
            _ => false,
        };
        for flag in SERVE_ONLY {
            assert_eq!(
                lists(&text, flag),
                serve_only(flag),
                "{cmd} --help and {flag}:\n{text}"
            );
        }
        let swift = lists(&text, "--swift-listen");
        assert_eq!(swift, matches!(cmd, "serve" | "init"), "{cmd}:\n{text}");
        let opens_volume = !matches!(cmd, "stats" | "compact");
        for flag in VOLUME {
            assert_eq!(
                lists(&text, flag),
                opens_volume,
                "{cmd} and {flag}:\n{text}"
            );
        }
        for flag in RECOVER_ONLY {
            assert_eq!(
                lists(&text, flag),
                cmd == "recover",
                "{cmd}, {flag}:\n{text}"
            );
        }
        for flag in ["--url", "--token-file", "--ca-file"] {
            assert_eq!(lists(&text, flag), cmd == "stats", "{cmd}, {flag}:\n{text}");
        }
        assert_eq!(
            lists(&text, "--metrics-listen"),
            matches!(cmd, "serve" | "init" | "stats"),
            "{cmd}:\n{text}"
        );
        assert_eq!(lists(&text, "--json"), cmd == "describe", "{cmd}:\n{text}");
        assert_eq!(
            lists(&text, "--tls-self-signed"),
            cmd == "init",
            "{cmd}:\n{text}"
        );
    }
    // The top-level help names every command.
    let top = help(&["--help"]);
    for cmd in commands {
        assert!(top.contains(cmd), "{top}");
    }
}

#[test]
fn a_flag_of_another_command_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_oram-proxy"))
        .args(["stats", "--swift-listen", "127.0.0.1:1"])
        .output()
        .expect("oram-proxy runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--swift-listen"), "{err}");
}

#[test]
fn key_and_user_commands_list_only_their_own_flags() {
    for sub in ["passphrase", "rotate", "status", "forget-earlier"] {
        let text = help(&["key", sub, "--help"]);
        for flag in SERVE_ONLY {
            assert!(!lists(&text, flag), "key {sub} and {flag}:\n{text}");
        }
        for flag in VOLUME {
            assert!(lists(&text, flag), "key {sub} lacks {flag}:\n{text}");
        }
    }
    for sub in ["add", "list", "remove", "rotate"] {
        let text = help(&["user", sub, "--help"]);
        for flag in ["--config", "--data-dir", "--url", "--token-file"] {
            assert!(lists(&text, flag), "user {sub} lacks {flag}:\n{text}");
        }
        for flag in SERVE_ONLY.iter().chain(VOLUME.iter()) {
            assert!(!lists(&text, flag), "user {sub} and {flag}:\n{text}");
        }
    }
    let top = help(&["--help"]);
    assert!(top.contains("key") && top.contains("user"), "{top}");
}
