//! How large Path ORAM's stash grows for a tree of a given number of leaves:
//! a simulation of the engine's own rounds (a round reads the union of its
//! accesses' paths, remaps each block to a fresh uniform leaf and evicts with
//! the engine's [`oram_tree::plan_eviction`]), without sealing or a store.
//!
//! It fills the tree with `--blocks` blocks (one write each, rounds of
//! `--batch`), then runs `--rounds` rounds of `--batch` accesses to uniformly
//! random blocks, and prints the stash after each round: its largest value and
//! how many rounds ended with at least k blocks, for each `--leaves-per-block`
//! divisor given (leaves = the power of two ≥ ⌈blocks / divisor⌉; the engine's
//! default divisor is 2). The engine refuses a round that leaves more than its
//! stash bound (89 by default) in the stash: this is the margin.
//!
//! `cargo run --release -p oram-path --example stash -- --blocks 65536 --divisors 2,4 --rounds 20000`

use std::collections::{BTreeSet, HashMap};

use oram_tree::{plan_eviction, Geometry};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

struct Args {
    blocks: u64,
    z: usize,
    batch: usize,
    rounds: u64,
    divisors: Vec<u64>,
    seed: u64,
}

fn args() -> Args {
    let mut a = Args {
        blocks: 1 << 14,
        z: 4,
        batch: 64,
        rounds: 2000,
        divisors: vec![2, 4],
        seed: 1,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).map(String::as_str).unwrap_or_default();
        let num = || value.parse::<u64>().expect("a number");
        match pair[0].as_str() {
            "--blocks" => a.blocks = num(),
            "--z" => a.z = num() as usize,
            "--batch" => a.batch = num() as usize,
            "--rounds" => a.rounds = num(),
            "--seed" => a.seed = num(),
            "--divisors" => {
                a.divisors = value
                    .split(',')
                    .map(|d| d.parse().expect("a number"))
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// One simulated Path ORAM: buckets by node, positions, stash.
struct Sim {
    geo: Geometry,
    buckets: HashMap<u64, Vec<u64>>,
    position: Vec<Option<u64>>,
    stash: Vec<u64>,
    rng: ChaCha20Rng,
}

impl Sim {
    fn round(&mut self, blocks: &[u64]) -> usize {
        let geo = self.geo;
        let mut nodes = BTreeSet::new();
        for &b in blocks {
            // A block not stored yet is read at a random leaf (as the engine does).
            let leaf = match self.position[b as usize] {
                Some(l) => l,
                None => {
                    self.stash.push(b);
                    self.rng.gen_range(0..geo.leaves)
                }
            };
            nodes.extend(geo.path(leaf));
            self.position[b as usize] = Some(self.rng.gen_range(0..geo.leaves));
        }
        for n in &nodes {
            if let Some(held) = self.buckets.remove(n) {
                self.stash.extend(held);
            }
        }
        self.stash.sort_unstable();
        self.stash.dedup();
        let listed: Vec<(u64, u64)> = self
            .stash
            .iter()
            .map(|&b| (b, self.position[b as usize].expect("placed")))
            .collect();
        let plan = plan_eviction(&geo, &listed, &nodes);
        let placed: BTreeSet<u64> = plan.values().flatten().copied().collect();
        self.stash.retain(|b| !placed.contains(b));
        self.buckets.extend(plan);
        self.stash.len()
    }
}

fn main() {
    let a = args();
    println!(
        "blocks {}, Z = {}, rounds of {} accesses, {} rounds after the fill",
        a.blocks, a.z, a.batch, a.rounds
    );
    println!("| leaves | slots ÷ blocks | largest stash | rounds ending with ≥ 20 / 40 / 60 / 89 blocks |");
    println!("|---|---|---|---|");
    for &d in &a.divisors {
        let geo = Geometry::new(a.blocks, a.z, 1, Some(a.blocks.div_ceil(d)));
        let mut sim = Sim {
            geo,
            buckets: HashMap::new(),
            position: vec![None; a.blocks as usize],
            stash: Vec::new(),
            rng: ChaCha20Rng::seed_from_u64(a.seed),
        };
        let ids: Vec<u64> = (0..a.blocks).collect();
        for chunk in ids.chunks(a.batch) {
            sim.round(chunk);
        }
        let mut largest = 0;
        let mut over = [0u64; 4];
        for _ in 0..a.rounds {
            let picked: Vec<u64> = (0..a.batch)
                .map(|_| sim.rng.gen_range(0..a.blocks))
                .collect();
            let s = sim.round(&picked);
            largest = largest.max(s);
            for (i, k) in [20, 40, 60, 89].into_iter().enumerate() {
                over[i] += u64::from(s >= k);
            }
        }
        let slots = geo.node_count() * a.z as u64;
        println!(
            "| {} | {:.2} | {} | {} / {} / {} / {} |",
            geo.leaves,
            slots as f64 / a.blocks as f64,
            largest,
            over[0],
            over[1],
            over[2],
            over[3]
        );
    }
}
