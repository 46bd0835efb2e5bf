//! `oram-proxy init`: the data directory (key, parameters, credentials), the
//! backend bucket, and with `--tls-self-signed` a private CA and certificate.

use oram_server::tls;

use crate::args::InitArgs;
use crate::error::CliError;
use crate::util::{logging, runtime, spinner, utc};

/// `oram-proxy init`.
pub fn run(args: InitArgs) -> Result<(), CliError> {
    let (cfg, root) = args.configure()?;
    logging("warn");
    let spinner = spinner("init");
    let progress = |step: &str| spinner.set_message(step.to_string());
    let done = runtime()?.block_on(async {
        oram_proxy::init_with_progress(&cfg, root, &progress)
            .await
            .map_err(|e| e.to_string())
    });
    spinner.finish_and_clear();
    for line in &done? {
        println!("{line}");
    }
    if args.tls_self_signed {
        let names = if args.tls_names.is_empty() {
            tls::default_names(&[&cfg.s3.listen, &cfg.swift.listen])
        } else {
            args.tls_names
        };
        let dir = tls::default_dir(&cfg.data_dir);
        let made = tls::generate_self_signed(&dir, &names).map_err(|e| e.to_string())?;
        println!(
            "created a private CA and a TLS certificate for {} (valid until {}, SHA-256 {})",
            made.names.join(", "),
            utc(made.info.not_after),
            made.info.fingerprint
        );
        println!(
            "  give clients the CA certificate: {}",
            made.ca_file.display()
        );
        println!("  server certificate: {}", made.cert_file.display());
        println!("  server key (0600):  {}", made.key_file.display());
        if cfg.tls.cert_file.is_some() {
            println!(
                "  note: [tls] names other files; point tls.cert_file and tls.key_file here to use these"
            );
        } else {
            println!("  `oram-proxy serve` with this data directory now speaks HTTPS");
        }
    }
    println!("data directory {} ready", cfg.data_dir.display());
    Ok(())
}
