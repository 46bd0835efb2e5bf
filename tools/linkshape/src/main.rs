//! `oram-linkshape --listen 127.0.0.1:19000 --target 127.0.0.1:9000 --rtt-ms 23.6 --mbit 510`
//!
//! Relays TCP from `--listen` to `--target` with the given round-trip time and
//! per-direction bandwidth cap (by default the link measured in the master's
//! thesis "Oblivious RAM in practice", Thoresen, NTNU 2019) until interrupted.

use std::net::SocketAddr;
use std::time::Duration;

use oram_linkshape::{start, LinkSpec};

fn usage() -> ! {
    eprintln!("usage: oram-linkshape --listen HOST:PORT --target HOST:PORT [--rtt-ms 23.6] [--mbit 510 | --mbit 0 (unlimited)]");
    std::process::exit(2)
}

fn main() {
    let mut listen: Option<SocketAddr> = None;
    let mut target: Option<SocketAddr> = None;
    let mut spec = LinkSpec::THESIS;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--listen" => listen = v.parse().ok(),
            "--target" => target = v.parse().ok(),
            "--rtt-ms" => {
                spec.rtt =
                    Duration::from_secs_f64(v.parse::<f64>().unwrap_or_else(|_| usage()) / 1000.0)
            }
            "--mbit" => {
                let m: f64 = v.parse().unwrap_or_else(|_| usage());
                spec.bits_per_second = (m > 0.0).then_some((m * 1e6) as u64);
            }
            _ => usage(),
        }
    }
    let (Some(listen), Some(target)) = (listen, target) else {
        usage()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let relay = start(listen, target, spec).await.unwrap_or_else(|e| {
            eprintln!("oram-linkshape: cannot listen on {listen}: {e}");
            std::process::exit(1)
        });
        println!(
            "relaying {} -> {target} with rtt {:?}, cap {:?} bit/s",
            relay.addr(),
            spec.rtt,
            spec.bits_per_second
        );
        let _ = tokio::signal::ctrl_c().await;
        relay.stop().await;
    });
}
