//! The coordination layer against a real 3-member etcd cluster (no mocks): leases
//! and membership, claims and fencing tokens, the front election, failover between
//! members, and what etcd sees.

mod support;

use std::sync::Arc;
use std::time::Duration;

use oram_cluster::{
    Claim, ClusterError, EtcdClient, FencingToken, FrontElection, Layout, Membership,
    MemoryRecorder, Ownership,
};
use support::{eventually, EtcdCluster};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{timeout, Instant};

/// etcd's minimum lease TTL with the default election timeout (1 s) is 2 s
/// (ceil(1.5 × election timeout)); shorter TTLs are raised to it.
const TTL: i64 = 2;
/// The bound on any wait for a lease to lapse (TTL, etcd's expiry sweep, slack).
const LAPSE: Duration = Duration::from_secs(10);

/// Waits (through watches of the registrations, bounded by `within`) until `node`
/// is no longer registered. Returns whether it dropped out.
async fn wait_until_gone(m: &Membership, node: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    for _ in 0..100 {
        let (nodes, rev) = m.live_nodes_at().await.expect("live nodes");
        if !nodes.iter().any(|n| n.id == node) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        m.wait_for_change(rev, deadline - now).await.expect("watch");
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stays_registered_while_it_renews_and_drops_out_after_it_stops() {
    let Some(etcd) = EtcdCluster::start(3).await else {
        return;
    };
    let m = Membership::new(etcd.client(), Layout::new("members").unwrap());
    let n1 = m.register("n1", "127.0.0.1:7001", TTL).await.unwrap();
    let n2 = m.register("n2", "127.0.0.1:7002", TTL).await.unwrap();
    assert_eq!(n1.lease().ttl(), Duration::from_secs(TTL as u64));
    let live = m.live_nodes().await.unwrap();
    let ids: Vec<_> = live
        .iter()
        .map(|n| (n.id.as_str(), n.address.as_str()))
        .collect();
    assert_eq!(ids, [("n1", "127.0.0.1:7001"), ("n2", "127.0.0.1:7002")]);
    assert_eq!(live[0].lease, n1.lease().id());

    // The local deadline moves with the renewals: a lease renewed every third
    // of its TTL holds past its first TTL.
    let deadline = n1.lease().deadline();
    let first = deadline.get();
    assert!(deadline.holds());
    tokio::time::sleep_until(first).await;
    assert!(deadline.holds() && deadline.get() > first);

    // n1 stops renewing, as a paused node would: it drops out after its TTL, and
    // learns that it lost its registration.
    n1.lease().stop_renewing();
    assert!(
        wait_until_gone(&m, "n1", LAPSE).await,
        "n1 still registered\n{}",
        etcd.logs()
    );
    // Its local deadline passed no later than etcd let the registration go.
    assert!(!deadline.holds());
    timeout(LAPSE, n1.lease().lost())
        .await
        .expect("n1 learns its lease is lost");
    // n2 was registered as long ago as n1 and outlived the TTL by renewing.
    let live = m.live_nodes().await.unwrap();
    assert_eq!(
        live.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(),
        ["n2"]
    );
    assert!(n2.lease().is_alive());

    // Deregistering removes a node at once.
    n2.deregister().await.unwrap();
    assert!(m.live_nodes().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_a_stale_read_fails_and_the_later_owner_holds_the_newer_token() {
    let Some(etcd) = EtcdCluster::start(3).await else {
        return;
    };
    let o = Ownership::new(etcd.client(), Layout::new("claims").unwrap(), 4);
    assert_eq!(o.owner(0).await.unwrap(), None);
    let Claim::Claimed(t1) = o.claim(0, "a", 0).await.unwrap() else {
        panic!("first claim")
    };
    assert_eq!(t1.partition, 0);
    // b read the partition as unowned: its claim fails and shows a as the owner.
    let Claim::Conflict(Some(cur)) = o.claim(0, "b", 0).await.unwrap() else {
        panic!("stale claim won")
    };
    assert_eq!((cur.node_id.as_str(), cur.token), ("a", t1));
    // With a fresh read b takes it, with a newer token.
    let Claim::Claimed(t2) = o.claim(0, "b", cur.token.revision).await.unwrap() else {
        panic!("claim")
    };
    assert!(t2.supersedes(&t1) && !t1.supersedes(&t2));
    // a, still holding its old read, cannot take it back.
    let Claim::Conflict(Some(cur)) = o.claim(0, "a", t1.revision).await.unwrap() else {
        panic!("a won")
    };
    assert_eq!(cur.node_id, "b");
    assert!(
        !o.check_token(&t1).await.unwrap(),
        "the old owner's token is refused"
    );
    assert!(o.check_token(&t2).await.unwrap());
    // A token of another partition with the same revision is not partition 0's.
    assert!(!o
        .check_token(&FencingToken {
            partition: 1,
            revision: t2.revision
        })
        .await
        .unwrap());
    assert!(matches!(
        o.claim(4, "a", 0).await,
        Err(ClusterError::InvalidName { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partitions_of_a_lapsed_node_move_to_live_nodes_and_its_tokens_are_refused() {
    let Some(etcd) = EtcdCluster::start(3).await else {
        return;
    };
    let layout = Layout::new("rebalance").unwrap();
    let m = Membership::new(etcd.client(), layout.clone());
    let o = Ownership::new(etcd.client(), layout, 12);
    let _n1 = m.register("n1", "127.0.0.1:7001", TTL).await.unwrap();
    let _n2 = m.register("n2", "127.0.0.1:7002", TTL).await.unwrap();
    let n3 = m.register("n3", "127.0.0.1:7003", TTL).await.unwrap();
    let moves = o.rebalance(&m).await.unwrap();
    assert_eq!(moves.len(), 12);
    assert!(
        o.rebalance(&m).await.unwrap().is_empty(),
        "a balanced cluster moves nothing"
    );
    let owners: Vec<_> = o
        .owners()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for n in ["n1", "n2", "n3"] {
        assert_eq!(owners.iter().filter(|r| r.node_id == n).count(), 4, "{n}");
    }
    let old: Vec<FencingToken> = owners
        .iter()
        .filter(|r| r.node_id == "n3")
        .map(|r| r.token)
        .collect();

    n3.lease().stop_renewing();
    assert!(
        wait_until_gone(&m, "n3", LAPSE).await,
        "n3 still registered"
    );
    let moves = o.rebalance(&m).await.unwrap();
    assert_eq!(moves.len(), 4, "exactly n3's partitions move: {moves:?}");
    for mv in &moves {
        assert_eq!(mv.from.as_deref(), Some("n3"));
        assert_ne!(mv.to, "n3");
        let before = old.iter().find(|t| t.partition == mv.partition).unwrap();
        assert!(mv.token.supersedes(before));
        assert!(
            !o.check_token(before).await.unwrap(),
            "n3's token for {} is refused",
            mv.partition
        );
        assert!(o.check_token(&mv.token).await.unwrap());
    }
    let owners = o.owners().await.unwrap();
    for n in ["n1", "n2"] {
        assert_eq!(
            owners
                .iter()
                .filter(|r| r.as_ref().unwrap().node_id == n)
                .count(),
            6,
            "{n}"
        );
    }
}

/// Not a test on its own: the node process the SIGSTOP test starts (this binary,
/// re-run with `ORAM_CLUSTER_CHILD` set). It registers, claims partition 0, says
/// `child: ready <revision>`, then `child: lost` once it learns its lease is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_node_process() {
    let Ok(endpoints) = std::env::var("ORAM_CLUSTER_CHILD") else {
        return;
    };
    let client = EtcdClient::new(endpoints.split(','), Duration::from_secs(2)).unwrap();
    let layout = Layout::new("paused").unwrap();
    let m = Membership::new(client.clone(), layout.clone());
    let o = Ownership::new(client, layout, 1);
    let reg = m.register("sleeper", "127.0.0.1:7100", TTL).await.unwrap();
    let expected = o.owner(0).await.unwrap().map_or(0, |r| r.token.revision);
    let Claim::Claimed(token) = o.claim(0, "sleeper", expected).await.unwrap() else {
        panic!("claim")
    };
    println!("child: ready {}", token.revision);
    timeout(Duration::from_secs(60), reg.lease().lost())
        .await
        .expect("lease lost within 60 s");
    println!("child: lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_process_paused_past_its_lease_drops_out_loses_its_partition_and_learns_it() {
    let Some(etcd) = EtcdCluster::start(3).await else {
        return;
    };
    let layout = Layout::new("paused").unwrap();
    let m = Membership::new(etcd.client(), layout.clone());
    let o = Ownership::new(etcd.client(), layout, 1);
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_node_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ORAM_CLUSTER_CHILD", etcd.endpoints().join(","))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap().to_string();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next_child_line = async || {
        for _ in 0..100 {
            let line = lines.next_line().await.unwrap().expect("child output");
            // libtest may print `test child_node_process ... ` on the same line.
            if let Some(at) = line.find("child: ") {
                return line[at + "child: ".len()..].to_string();
            }
        }
        panic!("no child line in 100 lines");
    };
    let ready = timeout(Duration::from_secs(20), next_child_line())
        .await
        .expect("child ready");
    let revision: i64 = ready.strip_prefix("ready ").unwrap().parse().unwrap();
    let stale = FencingToken {
        partition: 0,
        revision,
    };
    assert!(o.check_token(&stale).await.unwrap());
    assert!(m
        .live_nodes()
        .await
        .unwrap()
        .iter()
        .any(|n| n.id == "sleeper"));

    let signal = |sig: &'static str| {
        let pid = pid.clone();
        async move {
            let status = tokio::process::Command::new("kill")
                .args([sig, &pid])
                .status()
                .await
                .unwrap();
            assert!(status.success(), "kill {sig} {pid}");
        }
    };
    signal("-STOP").await;
    assert!(
        wait_until_gone(&m, "sleeper", LAPSE).await,
        "the paused node is still registered"
    );
    let _awake = m.register("awake", "127.0.0.1:7101", TTL).await.unwrap();
    let moves = o.rebalance(&m).await.unwrap();
    assert_eq!(moves.len(), 1);
    assert_eq!(
        (moves[0].from.as_deref(), moves[0].to.as_str()),
        (Some("sleeper"), "awake")
    );
    assert!(moves[0].token.supersedes(&stale));
    assert!(
        !o.check_token(&stale).await.unwrap(),
        "the paused node's token is refused"
    );

    // Resumed, the node learns it lost its lease before doing anything else.
    signal("-CONT").await;
    let lost = timeout(Duration::from_secs(20), next_child_line())
        .await
        .expect("child learns");
    assert_eq!(lost, "lost");
    let status = timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    assert!(o.check_token(&moves[0].token).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_front_takes_over_when_the_active_fronts_lease_lapses() {
    let Some(etcd) = EtcdCluster::start(3).await else {
        return;
    };
    let e = FrontElection::new(etcd.client(), Layout::new("fronts").unwrap());
    let f1 = e
        .campaign("front-1", TTL, Duration::ZERO)
        .await
        .unwrap()
        .expect("no front yet: f1 wins");
    assert_eq!(e.active().await.unwrap().unwrap().0, "front-1");
    // A standby's campaign runs out of patience while front-1 holds the key.
    assert!(e
        .campaign("front-2", TTL, Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());

    let standby = {
        let e = e.clone();
        tokio::spawn(async move { e.campaign("front-2", TTL, Duration::from_secs(15)).await })
    };
    // front-1 pauses: its lease lapses, the standby takes over, front-1 learns.
    f1.lease().stop_renewing();
    let f2 = timeout(Duration::from_secs(20), standby)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("takes over");
    assert_eq!(e.active().await.unwrap().unwrap().0, "front-2");
    assert!(f2.revision() > f1.revision());
    timeout(LAPSE, f1.lease().lost())
        .await
        .expect("front-1 learns it lost");

    // A resignation hands over at once to a standby already waiting (its watch of
    // the front key, seen by a recorder, shows it waits).
    let recorder = Arc::new(MemoryRecorder::new());
    let standby = {
        let client = etcd.client().with_recorder(recorder.clone());
        let e = FrontElection::new(client, Layout::new("fronts").unwrap());
        tokio::spawn(async move { e.campaign("front-3", TTL, Duration::from_secs(15)).await })
    };
    let watching = || async { recorder.requests().iter().any(|r| r.path == "/v3/watch") };
    assert!(
        eventually(LAPSE, watching).await,
        "the standby never waited"
    );
    assert!(!standby.is_finished());
    f2.resign().await.unwrap();
    let f3 = timeout(Duration::from_secs(20), standby)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("takes over");
    assert_eq!(f3.front_id(), "front-3");
    assert!(f3.lease().is_alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_keeps_working_after_one_etcd_member_is_killed() {
    let Some(mut etcd) = EtcdCluster::start(3).await else {
        return;
    };
    let client = etcd.client();
    let layout = Layout::new("failover").unwrap();
    let m = Membership::new(client.clone(), layout.clone());
    let o = Ownership::new(client.clone(), layout, 2);
    // A TTL that outlasts a leader election (the killed member may be the leader:
    // the others elect a new one within about 1 to 3 s), so that the keepalive
    // keeps the lease through it.
    let reg = m.register("n1", "127.0.0.1:7001", 5).await.unwrap();
    let Claim::Claimed(t1) = o.claim(0, "n1", 0).await.unwrap() else {
        panic!("claim")
    };
    // The client talks to the first member; kill it.
    etcd.kill(0).await;
    let killed = Instant::now();

    let (nodes, rev) = m.live_nodes_at().await.unwrap();
    assert_eq!(nodes.len(), 1, "{}", etcd.logs());
    let Claim::Claimed(t2) = o.claim(0, "n2", t1.revision).await.unwrap() else {
        panic!("claim")
    };
    assert!(t2.supersedes(&t1));
    assert!(o.check_token(&t2).await.unwrap());
    client.put(b"/failover/front", b"x", 0).await.unwrap();
    let lease = client.lease_grant(TTL).await.unwrap();
    assert!(client.lease_keepalive(lease.id).await.unwrap() > 0);
    client.lease_revoke(lease.id).await.unwrap();
    assert_eq!(
        client.lease_keepalive(lease.id).await.unwrap(),
        0,
        "a revoked lease is gone"
    );
    // A watch on the surviving members sees a change made after its cursor.
    let _n2 = m.register("n2", "127.0.0.1:7002", TTL).await.unwrap();
    let seen = m
        .wait_for_change(rev, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(seen
        .events
        .iter()
        .any(|e| e.kv.key == b"/failover/nodes/n2"));
    // n1's keepalive fails over too: it outlives its TTL after the kill. (The wait
    // is a watch on the surviving members that sees nothing.)
    let until = killed + reg.lease().ttl() + Duration::from_millis(500);
    let quiet = client
        .watch_once(
            b"/failover/none",
            &[],
            seen.revision + 1,
            until.saturating_duration_since(Instant::now()),
        )
        .await;
    assert!(quiet.unwrap().events.is_empty());
    assert!(reg.lease().is_alive());
    assert!(m.live_nodes().await.unwrap().iter().any(|n| n.id == "n1"));
}
