//! Records the build for `oram-proxy --version` and `/metrics` (see
//! `src/build_info.rs`): the git commit (with `-dirty` when the work tree had
//! changes), the profile and the target.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).map_or("unknown".into(), |c| {
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
        if dirty {
            format!("{c}-dirty")
        } else {
            c
        }
    });
    println!("cargo:rustc-env=ORAM_BUILD_COMMIT={commit}");
    println!(
        "cargo:rustc-env=ORAM_BUILD_PROFILE={}",
        std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into())
    );
    println!(
        "cargo:rustc-env=ORAM_BUILD_TARGET={}",
        std::env::var("TARGET").unwrap_or_else(|_| "unknown".into())
    );
    // A new commit or checkout changes HEAD or the branch it points at.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
