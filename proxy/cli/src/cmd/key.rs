//! `oram-proxy key passphrase | rotate | status | forget-earlier`: the master
//! key and its passphrase, changed while the proxy is stopped (each takes the
//! data directory's lock). Secrets come from files and the environment as for
//! `serve`, never from the command line; there is no prompt.

use oram_volume::key::{
    env_secret, key_from_hex, read_passphrase_file, ENV_NEW_KEY, ENV_NEW_PASSPHRASE,
};
use oram_volume::{NewMasterKey, VolumeHooks};

use crate::args::{KeyArgs, KeyCommand};
use crate::error::CliError;
use crate::util::{logging, runtime, spinner};

/// `oram-proxy key ...`.
pub fn run(args: KeyArgs) -> Result<(), CliError> {
    match args.command {
        KeyCommand::Passphrase(a) => {
            let new = match (&a.new_passphrase_file, env_secret(ENV_NEW_PASSPHRASE)) {
                (Some(path), _) => read_passphrase_file(path).map_err(|e| e.to_string())?,
                (None, Some(p)) => zeroize::Zeroizing::new(p.as_bytes().to_vec()),
                (None, None) => {
                    return Err(format!(
                        "give the new passphrase with --new-passphrase-file or {ENV_NEW_PASSPHRASE}"
                    )
                    .into())
                }
            };
            let (cfg, _) = a.volume.configure()?;
            logging("warn");
            let s = spinner("changing the passphrase");
            let r = runtime()?.block_on(async {
                cfg.validate()?;
                oram_volume::change_passphrase(&cfg.volume(), &VolumeHooks::default(), &new)
                    .await
                    .map_err(|e| e.to_string())
            });
            s.finish_and_clear();
            let key_file = r?;
            println!(
                "the passphrase of {} changed: start with the new one; the old one no longer \
                 opens the volume (its master key is unchanged: rotate it with `oram-proxy key \
                 rotate` if the old passphrase leaked)",
                cfg.data_dir.display()
            );
            if let Some(path) = key_file {
                println!(
                    "{} still holds the master key and still opens the volume: delete it                      (shred) if only the passphrase should",
                    path.display()
                );
            }
            Ok(())
        }
        KeyCommand::Rotate(a) => {
            let new = if a.new_key_from_env {
                let hex = env_secret(ENV_NEW_KEY)
                    .ok_or_else(|| format!("--new-key-from-env: {ENV_NEW_KEY} is not set"))?;
                NewMasterKey::Given(key_from_hex(&hex, ENV_NEW_KEY).map_err(|e| e.to_string())?)
            } else {
                NewMasterKey::Generate
            };
            let (cfg, _) = a.volume.configure()?;
            logging("warn");
            let s = spinner("rotating the master key");
            let r = runtime()?.block_on(async {
                cfg.validate()?;
                oram_volume::rotate_key(&cfg.volume(), &VolumeHooks::default(), new)
                    .await
                    .map_err(|e| e.to_string())
            });
            s.finish_and_clear();
            let r = r?;
            println!(
                "{} seals under a new master key from checkpoint epoch {} on",
                cfg.data_dir.display(),
                r.since_epoch
            );
            match &r.key_file {
                Some(p) => println!("  the new key is in {}", p.display()),
                None if a.new_key_from_env => {
                    println!(
                        "  start with {} set to the new key",
                        oram_volume::key::ENV_KEY
                    )
                }
                None => println!("  the passphrase now wraps the new key"),
            }
            println!(
                "  {} earlier key(s) kept, wrapped under the new one (here and in the backend's \
                 header): objects still sealed under them open, `recover` included",
                r.earlier_keys
            );
            println!(
                "  checkpoint epoch {} taken under the new key; objects move to it as the \
                 engine rewrites them: follow `oram-proxy key status`",
                r.checkpoint.epoch
            );
            Ok(())
        }
        KeyCommand::Status(a) => {
            let (cfg, _) = a.volume.configure()?;
            let st = runtime()?
                .block_on(oram_volume::key_status(&cfg.volume()))
                .map_err(|e| e.to_string())?;
            println!("key of {}", cfg.data_dir.display());
            println!(
                "  source: {}{}",
                st.key_source,
                match (st.passphrase, st.wrapped) {
                    (true, true) => " (the passphrase wraps the master key)",
                    (true, false) =>
                        " (the master key is the passphrase's Argon2id output; the first \
                         `key passphrase` wraps it)",
                    _ => "",
                }
            );
            println!("  earlier keys kept: {}", st.earlier_keys);
            match st.rotation {
                None => println!("  no rotation in progress"),
                Some(r) => {
                    println!(
                        "  rotation: {} of {} backend positions re-sealed under the current key \
                         ({:.1} %), counting from checkpoint epoch {}",
                        r.resealed,
                        r.positions,
                        100.0 * r.ratio(),
                        r.since_epoch
                    );
                    if r.complete {
                        println!(
                            "  complete: `oram-proxy key forget-earlier` drops the earlier keys"
                        );
                    } else if r.resealed == r.positions {
                        println!("  every position re-sealed: complete after the next checkpoint");
                    } else {
                        println!("  in progress: accesses re-seal what they rewrite");
                    }
                }
            }
            Ok(())
        }
        KeyCommand::ForgetEarlier(a) => {
            let (cfg, _) = a.volume.configure()?;
            logging("warn");
            let n = runtime()?
                .block_on(async {
                    cfg.validate()?;
                    oram_volume::forget_earlier_keys(&cfg.volume(), &VolumeHooks::default())
                        .await
                        .map_err(|e| e.to_string())
                })
                .map_err(CliError::Failed)?;
            println!(
                "{n} earlier key(s) dropped from {} and the backend's header",
                cfg.data_dir.display()
            );
            Ok(())
        }
    }
}
