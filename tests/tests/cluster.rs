//! A cluster's failures that the conformance suite (front and nodes over one
//! state database, `cluster_conformance.rs`) cannot produce: the front's and
//! each node's trusted state in databases of their own, a front commit that
//! fails after every node committed its part, a front whose owner tokens
//! are stale, and a front's checkpoint beside a node's.

use std::path::Path;
use std::sync::Arc;

use oram_blockstore::{BlockStore, Recording};
use oram_engine::conformance::{block_data, fill, read_back, test_sealer, Model};
use oram_engine::{Op, Oram, OramError, Parts};
use oram_oblivistore::{oblivistore_blueprint, ObliviStoreConfig};
use oram_partition::Blueprint;
use oram_state::Space;
use oram_statedb::Db;
use oram_store_fs::FsStore;
use oram_tests::cluster::clustered;

const VOL: [u8; 16] = [5; 16];
const NODES: usize = 3;
const BLOCK: usize = 256;

fn blueprint() -> Blueprint {
    let mut cfg = ObliviStoreConfig::new(512, BLOCK, 8, 16);
    cfg.framework.cache_bound = 1 << 20;
    cfg.framework.round_attempts = 1;
    cfg.framework.rng_seed = Some([9; 32]);
    oblivistore_blueprint(cfg, "vol0").expect("valid configuration")
}

/// The front's database and one per node.
struct Dbs {
    front: Arc<Db>,
    nodes: Vec<Arc<Db>>,
}

impl Dbs {
    fn open(dir: &Path) -> Self {
        Self {
            front: Db::open(&dir.join("front.redb"), VOL).unwrap(),
            nodes: (0..NODES)
                .map(|n| Db::open(&dir.join(format!("node{n}.redb")), VOL).unwrap())
                .collect(),
        }
    }
}

fn parts(store: &Arc<dyn BlockStore>, db: &Arc<Db>) -> Parts {
    Parts {
        store: store.clone(),
        sealer: test_sealer(),
        state: Box::new(db.state(Space(0)).unwrap()),
    }
}

fn cluster(store: &Arc<dyn BlockStore>, dbs: &Dbs, token_skew: u64) -> Arc<dyn Oram> {
    clustered(
        &blueprint(),
        parts(store, &dbs.front),
        dbs.nodes.iter().map(|db| parts(store, db)).collect(),
        token_skew,
    )
}

/// An fs store in `dir/store` behind a recording of what it is sent: the
/// recording, and the store as the cluster sees it.
fn recorded_store(dir: &Path) -> (Arc<Recording<FsStore>>, Arc<dyn BlockStore>) {
    let recording = Arc::new(Recording::new(FsStore::open(dir.join("store")).unwrap()));
    let store: Arc<dyn BlockStore> = recording.clone();
    (recording, store)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Writes block 0 (and reads block 1) in a round whose front commit fails
/// (an I/O error of its database) after every node landed and committed its
/// part: the round's intent is committed and its partitions staged when its
/// writes reach the backend, held there meanwhile; the front's next commit is
/// the round's.
async fn nodes_commit_a_round_the_front_does_not(
    front: &Arc<dyn Oram>,
    hold: &oram_engine::conformance::HoldStore<FsStore>,
    dbs: &Dbs,
) {
    hold.set_puts_open(false);
    let writer = {
        let front = front.clone();
        tokio::spawn(async move {
            front
                .access(vec![Op::Write(0, block_data(0, 2, BLOCK)), Op::Read(1)])
                .await
        })
    };
    let mut waited = 0;
    while hold.puts_waiting() == 0 {
        assert!(waited < 500, "no PUT of the round reached the backend");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        waited += 1;
    }
    dbs.front.inject_commit_failure();
    hold.set_puts_open(true);
    let err = writer.await.unwrap().unwrap_err();
    assert!(matches!(err, OramError::State(_)), "{err}");
    assert!(dbs.front.failure().is_some());
    for (n, db) in dbs.nodes.iter().enumerate() {
        assert!(db.failure().is_none(), "node {n} committed its part");
    }
}

/// Restarts the cluster on the store and databases under `dir` (after
/// [`nodes_commit_a_round_the_front_does_not`]): the interrupted round is
/// repeated once, the 40 blocks of `model` read back, and the check finds
/// every block and no problem.
fn restart_and_read_back(dir: &Path, model: &Model) {
    runtime().block_on(async {
        let store: Arc<dyn BlockStore> = Arc::new(FsStore::open(dir.join("store")).unwrap());
        let dbs = Dbs::open(dir);
        let e = cluster(&store, &dbs, 0);
        read_back(e.as_ref(), model, 40, 8).await;
        assert_eq!(e.stats().extra("rounds_repeated_total"), Some(1));
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.blocks_found, 40);
    });
}

/// Every node lands and commits its part of a round of writes; then the
/// front's own commit fails (an I/O error of its database) and the front
/// restarts. The round is repeated: each node answers it from its ledger —
/// the blocks it *took* from its partitions in that round among them — so the
/// block the failed write moved keeps its acknowledged data. Without the
/// ledger the repeat would take the block again from a partition that no
/// longer holds it.
#[test]
fn a_round_the_nodes_committed_and_the_front_did_not_is_answered_from_their_ledgers() {
    use oram_engine::conformance::HoldStore;

    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("store");
    let mut model = Model::new();
    let rt = runtime();
    rt.block_on(async {
        let hold = Arc::new(HoldStore::new(FsStore::open(&store_path).unwrap()));
        let store: Arc<dyn BlockStore> = hold.clone();
        let dbs = Dbs::open(dir.path());
        let e = cluster(&store, &dbs, 0);
        fill(e.as_ref(), &mut model, 0..40, 1).await;
        nodes_commit_a_round_the_front_does_not(&e, &hold, &dbs).await;
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    restart_and_read_back(dir.path(), &model);
}

/// A node's checkpoint keeps the answers of the latest round only. Nodes
/// commit a round whose front commit then fails (as above); each node then
/// drops what its checkpoint would not hold (`HostQuiet::drop_stale_answers`,
/// before its snapshot): every ledger behind its node's latest round loses
/// its answers and keeps its round number, the latest round's ledgers keep
/// theirs — and the restarted front's repeat of that round is still answered
/// from them, every acknowledged block intact. (Every partition used to keep
/// its own last round's answers: a node checkpoint held a round of blocks for
/// each partition, ~33 MiB for 128 partitions of 4 KiB blocks.)
#[test]
fn a_node_keeps_only_the_latest_round_s_answers_and_still_answers_its_repeat() {
    use oram_engine::conformance::HoldStore;
    use oram_partition::PartitionedConfig;
    use oram_state::TrustedState;
    use oram_tests::cluster::{node_partitions, start_cluster_hosts};

    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("store");
    let mut model = Model::new();
    let rt = runtime();
    rt.block_on(async {
        let hold = Arc::new(HoldStore::new(FsStore::open(&store_path).unwrap()));
        let store: Arc<dyn BlockStore> = hold.clone();
        let dbs = Dbs::open(dir.path());
        let (front, threads, _, hosts) = start_cluster_hosts(
            &blueprint(),
            parts(&store, &dbs.front),
            dbs.nodes.iter().map(|db| parts(&store, db)).collect(),
            0,
        );
        fill(front.as_ref(), &mut model, 0..40, 1).await;
        nodes_commit_a_round_the_front_does_not(&front, &hold, &dbs).await;

        let mut dropped = 0;
        for h in &hosts {
            let mut quiet = h.quiesce().await.unwrap();
            dropped += quiet.drop_stale_answers().await.unwrap();
        }
        assert!(dropped > 0, "the fill's rounds left answers to drop");
        let (mut kept, mut behind) = (0, 0);
        for (n, db) in dbs.nodes.iter().enumerate() {
            // (round, answers kept) of each ledger, as committed.
            let ledgers: Vec<(u64, bool)> = node_partitions(&blueprint(), n as u32, NODES as u32)
                .into_iter()
                .filter_map(|p| {
                    let state = db
                        .state(PartitionedConfig::ledger_space(Space(0), p))
                        .unwrap();
                    let record = state.meta(b"node/done")?.clone();
                    let seq = u64::from_be_bytes(record[..8].try_into().unwrap());
                    Some((seq, record[8..12] != [0xff; 4]))
                })
                .collect();
            let latest = ledgers
                .iter()
                .map(|l| l.0)
                .max()
                .expect("a round committed");
            for &(seq, answers) in &ledgers {
                assert_eq!(
                    answers,
                    seq == latest,
                    "node {n}: round {seq}, latest {latest}"
                );
                kept += usize::from(answers);
                behind += usize::from(seq < latest);
            }
        }
        assert!(kept > 0 && behind > 0, "kept {kept}, behind {behind}");
        drop(front);
        tokio::task::spawn_blocking(move || drop(threads))
            .await
            .unwrap();
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    restart_and_read_back(dir.path(), &model);
}

/// A front whose owner tokens are not the nodes' (a stale view of who owns
/// what) is refused by every node before anything is staged: its access
/// fails, the storage server sees no request, and a front with the right
/// tokens then reads everything as it was.
#[test]
fn a_front_naming_stale_owner_tokens_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (recording, store) = recorded_store(dir.path());
    let mut model = Model::new();
    runtime().block_on(async {
        let dbs = Dbs::open(dir.path());
        let e = cluster(&store, &dbs, 0);
        fill(e.as_ref(), &mut model, 0..32, 1).await;
        drop(e);
        recording.take_trace();
        let stale = cluster(&store, &dbs, 1);
        let err = stale
            .access(vec![Op::Read(3), Op::Write(4, block_data(4, 9, BLOCK))])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("owner token"), "{err}");
        assert!(
            recording.take_trace().is_empty(),
            "a refused front's round reached the storage server"
        );
        drop(stale);
        let e = cluster(&store, &dbs, 0);
        read_back(e.as_ref(), &model, 32, 8).await;
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

/// With the front's state shipped (its log taken: a commit resolves only once
/// its bytes have landed), no sub-access of a round goes out before the
/// round's intent record has landed: while the log is held, the storage
/// server sees nothing of the round; once it lands, the round runs and the
/// access completes. A front rebuilt from its checkpoint and log (`recover`)
/// therefore knows every round its nodes may have landed. (Without it, the
/// intent is committed locally only and the round goes out at once.)
#[test]
fn a_front_ships_a_round_s_intent_before_the_round_goes_out() {
    let dir = tempfile::tempdir().unwrap();
    let (recording, store) = recorded_store(dir.path());
    let mut model = Model::new();
    runtime().block_on(async {
        let dbs = Dbs::open(dir.path());
        let e = cluster(&store, &dbs, 0);
        fill(e.as_ref(), &mut model, 0..16, 1).await;
        let log = dbs.front.ship_log().unwrap();
        recording.take_trace();
        let writer = {
            let e = e.clone();
            tokio::spawn(async move { e.access(vec![Op::Write(3, block_data(3, 7, BLOCK))]).await })
        };
        // The intent record reaches the log's stream (not yet landed) ...
        let mut waited = 0;
        while log.position().0 == 0 {
            assert!(
                waited < 500,
                "the round's intent record was never committed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            waited += 1;
        }
        // ... and while it is held, nothing of the round goes out.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!writer.is_finished());
        assert!(
            recording.take_trace().is_empty(),
            "a sub-access went out before its round's intent record landed"
        );
        // Landing the log lets the round run and commit.
        let mut shipped = 0u64;
        for _ in 0..2000 {
            loop {
                let (start, bytes) = log.take(1 << 16);
                assert_eq!(start, shipped);
                if bytes.is_empty() {
                    break;
                }
                shipped += bytes.len() as u64;
                log.landed(shipped);
            }
            if writer.is_finished() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(
            writer.is_finished(),
            "the access did not complete once the log landed"
        );
        writer.await.unwrap().unwrap();
        assert!(
            !recording.take_trace().is_empty(),
            "the round never reached the backend"
        );
    });
}

/// A cluster's front does not grow (its partitions are served by nodes):
/// refused, nothing sent, its capacity unchanged.
#[test]
fn a_cluster_front_refuses_to_grow() {
    let dir = tempfile::tempdir().unwrap();
    let (recording, store) = recorded_store(dir.path());
    runtime().block_on(async {
        let dbs = Dbs::open(dir.path());
        let e = cluster(&store, &dbs, 0);
        let capacity = e.capacity();
        recording.take_trace();
        assert!(!e.grows());
        let err = e.grow(2 * capacity, &|_, _| {}).await.unwrap_err();
        assert!(matches!(err, OramError::Unsupported(_)), "{err}");
        assert_eq!(e.capacity(), capacity);
        assert!(
            recording.take_trace().is_empty(),
            "the refused growth sent requests"
        );
    });
}

/// A node dies while its partition's writes of a round hang on the backend
/// (the other nodes' writes hang too, then land and commit once the backend
/// answers): the front's round fails. The node restarts from its database at
/// the same address; the front, still running, repeats the round — the nodes
/// that committed answer from their ledgers, the restarted one stages it again
/// — and every acknowledged block reads back, with the map and the partitions
/// in agreement.
#[test]
fn a_node_that_dies_in_a_round_is_restarted_and_the_round_repeated() {
    use oram_engine::conformance::HoldStore;
    use oram_tests::cluster::{node_host, start_cluster, NodeThread};

    let dir = tempfile::tempdir().unwrap();
    let hold = Arc::new(HoldStore::new(
        FsStore::open(dir.path().join("store")).unwrap(),
    ));
    let store: Arc<dyn BlockStore> = hold.clone();
    let mut model = Model::new();
    runtime().block_on(async {
        let dbs = Dbs::open(dir.path());
        let bp = blueprint();
        let (front, nodes, addrs) = start_cluster(
            &bp,
            parts(&store, &dbs.front),
            dbs.nodes.iter().map(|db| parts(&store, db)).collect(),
            0,
        );
        let mut nodes: Vec<Option<NodeThread>> = nodes.into_iter().map(Some).collect();
        fill(front.as_ref(), &mut model, 0..40, 1).await;

        hold.set_puts_open(false);
        let writer = {
            let front = front.clone();
            tokio::spawn(async move {
                front
                    .access(vec![Op::Write(5, block_data(5, 2, BLOCK)), Op::Read(6)])
                    .await
            })
        };
        let mut waited = 0;
        while hold.puts_waiting() == 0 {
            assert!(waited < 500, "no PUT of the round reached the backend");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            waited += 1;
        }
        // The node of the first partition whose writes hang dies.
        let key = hold.puts_held().into_iter().next().unwrap();
        let partition: u32 = key.split('/').nth(2).unwrap().parse().unwrap();
        let victim = (partition as usize) % NODES;
        let dead = nodes[victim].take();
        tokio::task::spawn_blocking(move || drop(dead))
            .await
            .unwrap();
        hold.set_puts_open(true);
        let failed = writer.await.unwrap();
        assert!(failed.is_err(), "a round whose node died succeeded");

        // Restarted from its own database, where it listened before.
        let restarted = node_host(
            &bp,
            Space(0),
            parts(&store, &dbs.nodes[victim]),
            victim as u32,
            NODES as u32,
        );
        let (thread, addr) = NodeThread::start_at(restarted, addrs[victim].clone());
        assert_eq!(addr, addrs[victim]);
        nodes[victim] = Some(thread);

        read_back(front.as_ref(), &model, 40, 8).await;
        assert!(front.stats().extra("rounds_repeated_total").unwrap_or(0) >= 1);
        let rep = front.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.blocks_found, 40);
        drop(front);
        tokio::task::spawn_blocking(move || drop(nodes))
            .await
            .unwrap();
    });
}

/// A front whose certificate another CA signed is refused at the handshake:
/// its access fails naming TLS, and nothing reaches the storage server.
#[test]
fn a_member_of_another_cluster_is_refused_at_the_handshake() {
    use oram_node::{mint_ca, mint_member, ClusterTls, NodeLink, RemotePlacement, Timeouts};
    use oram_tests::cluster::{node_host, NodeThread};

    let dir = tempfile::tempdir().unwrap();
    let (recording, store) = recorded_store(dir.path());
    runtime().block_on(async {
        let dbs = Dbs::open(dir.path());
        let bp = blueprint();
        let host = node_host(&bp, Space(0), parts(&store, &dbs.nodes[0]), 0, 1);
        let (node, addr) = NodeThread::start(host);
        let other = mint_ca("another").unwrap();
        let (chain, key) = mint_member(&other, "intruder").unwrap();
        let tls = ClusterTls::from_pem(other.cert_pem.as_bytes(), chain.as_bytes(), key.as_bytes())
            .unwrap();
        let link = NodeLink::new(addr, tls, BLOCK, Timeouts::default());
        let mut placement = RemotePlacement::new();
        for p in 0..bp.cfg.partitions {
            placement.own(p, link.clone(), 100);
        }
        let front = bp.engine(parts(&store, &dbs.front), &placement).unwrap();
        let err = front.access(vec![Op::Read(1)]).await.unwrap_err();
        assert!(err.to_string().contains("TLS"), "{err}");
        assert!(recording.take_trace().is_empty());
        drop(front);
        tokio::task::spawn_blocking(move || drop(node))
            .await
            .unwrap();
    });
}

/// A front's quiesce (its checkpoint's) holds nothing on its nodes: it
/// completes while a node holds every partition it serves for a checkpoint of
/// its own, and the cluster serves on once both let go. (It used to hold each
/// partition on its node over a connection of its own, one after the other:
/// seconds of held rounds per front checkpoint over a slow link, and a wait on
/// every node checkpoint under way.)
#[test]
fn a_front_s_quiesce_holds_nothing_on_its_nodes() {
    use oram_tests::cluster::start_cluster_hosts;

    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn BlockStore> = Arc::new(FsStore::open(dir.path().join("store")).unwrap());
    let mut model = Model::new();
    runtime().block_on(async {
        let dbs = Dbs::open(dir.path());
        let (front, threads, _, hosts) = start_cluster_hosts(
            &blueprint(),
            parts(&store, &dbs.front),
            dbs.nodes.iter().map(|db| parts(&store, db)).collect(),
            0,
        );
        fill(front.as_ref(), &mut model, 0..30, 1).await;

        // Node 1 holds its partitions, as its checkpoint does.
        let node_quiet = hosts[1].quiesce().await.unwrap();
        let quiet = tokio::time::timeout(std::time::Duration::from_secs(30), front.quiesce())
            .await
            .expect("the front's quiesce waited for a node's")
            .unwrap();
        drop(quiet);
        drop(node_quiet);

        fill(front.as_ref(), &mut model, 30..40, 2).await;
        read_back(front.as_ref(), &model, 40, 8).await;
        drop(front);
        tokio::task::spawn_blocking(move || drop(threads))
            .await
            .unwrap();
    });
}
