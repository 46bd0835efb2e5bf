//! The cost of serving a partition engine's partitions from nodes: the same
//! ObliviStore workload, in one run, with every partition in this process
//! (`local`) and with its partitions on 3 nodes over mutual TLS on loopback
//! (`cluster`), each node on its own threads. Reports accesses per second and
//! CPU per access: the whole process for `local`; for `cluster`, the front's
//! (the process less the nodes' threads) and the nodes' together.
//!
//! Terms: memory store and in-memory trusted state (no fsync: what is measured
//! is CPU and the loopback round trips), blocks of `--block` bytes, `--capacity`
//! blocks, 64 partitions, rounds of 64 ops; the volume is filled, then
//! `--ops` ops (half reads, half writes of uniformly random blocks) in batches
//! of 64 by one caller. CPU comes from `/proc` in ticks of 10 ms.
//!
//! `cargo run -p oram-benches --example cluster_cpu -- --ops 20000` (the dev
//! profile: dependencies at opt-level 3, the workspace at 1, for both settings).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use oram_blockstore::BlockStore;
use oram_engine::{Local, Op, Oram, Parts};
use oram_oblivistore::{oblivistore_blueprint, ObliviStoreConfig};
use oram_state::MemState;
use oram_store_memory::MemoryStore;
use oram_tests::cluster::{node_parts, process_cpu_ticks, start_cluster, NodeThread};
use oram_tests::test_sealer;
use rand::{Rng, SeedableRng};

struct Args {
    ops: u64,
    capacity: u64,
    block: usize,
}

fn args() -> Args {
    let mut a = Args {
        ops: 4096,
        capacity: 8192,
        block: 4096,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse::<u64>().ok());
        match (pair[0].as_str(), value) {
            ("--ops", Some(v)) => a.ops = v,
            ("--capacity", Some(v)) => a.capacity = v,
            ("--block", Some(v)) => a.block = v as usize,
            _ => {
                eprintln!("usage: cluster_cpu [--ops N] [--capacity BLOCKS] [--block BYTES]");
                std::process::exit(2);
            }
        }
    }
    a
}

struct Measured {
    secs: f64,
    ticks: u64,
    node_ticks: u64,
}

/// Fills the volume, then runs the measured ops; returns their wall time, the
/// process's CPU ticks and the nodes' CPU ticks over them.
async fn workload(e: &dyn Oram, a: &Args, nodes: &[NodeThread]) -> (f64, u64, u64) {
    let node_ticks = || nodes.iter().map(NodeThread::cpu_ticks).sum::<u64>();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let data = |b: u64| Bytes::from(vec![(b % 251) as u8; a.block]);
    for start in (0..a.capacity).step_by(64) {
        let ops = (start..(start + 64).min(a.capacity))
            .map(|b| Op::Write(b, data(b)))
            .collect();
        e.access(ops).await.expect("fill");
    }
    let (t0, c0, n0) = (Instant::now(), process_cpu_ticks(), node_ticks());
    let mut done = 0;
    while done < a.ops {
        let n = 64.min(a.ops - done);
        let ops = (0..n)
            .map(|i| {
                let b = rng.gen_range(0..a.capacity);
                if i % 2 == 0 {
                    Op::Read(b)
                } else {
                    Op::Write(b, data(b))
                }
            })
            .collect();
        let got = e.access(ops).await.expect("an access");
        assert_eq!(got.len() as u64, n);
        done += n;
    }
    (
        t0.elapsed().as_secs_f64(),
        process_cpu_ticks() - c0,
        node_ticks() - n0,
    )
}

fn main() {
    let a = args();
    let mut cfg = ObliviStoreConfig::new(a.capacity, a.block, 64, 64);
    cfg.framework.rng_seed = Some([3; 32]);
    let blueprint = oblivistore_blueprint(cfg, "vol0").expect("a configuration");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let parts = || Parts {
        store: Arc::new(MemoryStore::new()) as Arc<dyn BlockStore>,
        sealer: test_sealer(),
        state: Box::new(MemState::new()),
    };

    let local = blueprint.engine(parts(), &Local).expect("the engine");
    let (secs, ticks, node_ticks) = rt.block_on(workload(&local, &a, &[]));
    drop(local);
    let local = Measured {
        secs,
        ticks,
        node_ticks,
    };

    let front = parts();
    let nodes = (0..3).map(|_| node_parts(&front)).collect();
    let (engine, threads, _) = start_cluster(&blueprint, front, nodes, 0);
    let (secs, ticks, node_ticks) = rt.block_on(workload(engine.as_ref(), &a, &threads));
    drop(engine);
    drop(threads);
    let cluster = Measured {
        secs,
        ticks,
        node_ticks,
    };

    let per = |ticks: u64| ticks as f64 * 10_000.0 / a.ops as f64;
    println!(
        "| setting | accesses/s | CPU µs per access (process) | of which the nodes' | the front's |"
    );
    println!("|---|---|---|---|---|");
    for (name, m) in [("local", &local), ("cluster (3 nodes)", &cluster)] {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.0} |",
            a.ops as f64 / m.secs,
            per(m.ticks),
            per(m.node_ticks),
            per(m.ticks.saturating_sub(m.node_ticks)),
        );
    }
    println!(
        "\nratio cluster/local accesses per second: {:.2}; {} ops, {} blocks of {} bytes",
        local.secs / cluster.secs,
        a.ops,
        a.capacity,
        a.block
    );
}
