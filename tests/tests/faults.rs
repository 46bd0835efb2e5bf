//! The fault battery: the real proxy (in process, over TCP, aws-sdk-s3 as the
//! client) on every engine, its backend behind the fault-injecting wrapper
//! (`oram_blockstore::faults`): latency spikes, 5xx, throttling, connection resets
//! before and after a write was applied, truncated and oversized bodies, PUTs that
//! time out and land later. A mixed workload runs with client retries off, so
//! every failure is seen. Required:
//!
//! * every failure the client sees is a clean `503` (no 500, no cut connection);
//! * no GET ever returns a wrong byte (each answer is one of the states its key
//!   may be in, tracked like the crash torture's model);
//! * every acknowledged write is intact afterwards (faults off, late PUTs landed);
//! * the trace keeps its shape: under faults the engine sends PUTs, whole GETs and
//!   ranged GETs of exactly the sizes it sends without faults.
//!
//! Adding an engine is one line in `ENGINES`. The counts are printed and written
//! to `$CARGO_TARGET_DIR/fault-battery-summary.txt`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::{Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use oram_blockstore::faults::{FaultCounts, FaultPlan, FaultStore};
use oram_blockstore::{BlockStore, BlockStoreExt, Recording, Verb};
use oram_proxy::{Config, UserConfig, VolumeHooks};
use rand::{Rng, SeedableRng};

/// The engines the battery runs over (one line per engine; a new engine last,
/// so that the others keep their seeds).
const ENGINES: &[&str] = &["path", "ring", "curious", "direct", "oblivistore"];
/// Client operations per engine and fault run.
const OPS: usize = 160;
const KEYS: usize = 12;

type Rec = Recording<Arc<FaultStore<Arc<dyn BlockStore>>>>;

fn client(endpoint: &str) -> Client {
    let http = aws_smithy_http_client::Builder::new().build_http();
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new(
            "fault",
            "fault-secret",
            None,
            None,
            "test",
        ))
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
        .http_client(http)
        .build();
    Client::from_conf(conf)
}

#[derive(Default, Debug)]
struct Tally {
    requests: u64,
    acknowledged: u64,
    failed_503: u64,
    unclean: Vec<String>,
    wrong_bytes: u64,
    reads_checked: u64,
}

/// The outcome class of a failed request: `Ok` for a clean 503.
fn classify<E: std::fmt::Debug>(e: &aws_sdk_s3::error::SdkError<E>) -> Result<(), String> {
    match e {
        aws_sdk_s3::error::SdkError::ServiceError(se) if se.raw().status().as_u16() == 503 => {
            Ok(())
        }
        other => Err(format!("{other:?}").chars().take(300).collect()),
    }
}

/// Sizes by (verb, key class): the shape of a trace without its keys and order.
fn shape(trace: &[oram_blockstore::TraceEvent]) -> BTreeSet<(Verb, String, u64)> {
    trace
        .iter()
        .filter_map(|e| {
            // The key class: `<prefix>/<kind>/`; meta objects are left out.
            let mut parts = e.key.split('/');
            let class = format!("{}/{}", parts.next()?, parts.next()?);
            if class.ends_with("/meta") {
                return None;
            }
            match e.verb {
                Verb::Put => Some((e.verb, class, e.size)),
                Verb::GetRange => e.range.as_ref().map(|r| (e.verb, class, r.end - r.start)),
                // A whole GET of a missing object (never written) has size 0.
                Verb::Get if e.size > 0 => Some((e.verb, class, e.size)),
                _ => None,
            }
        })
        .collect()
}

async fn run(
    kind: &str,
    faults: bool,
    seed: u64,
) -> (Tally, FaultCounts, BTreeSet<(Verb, String, u64)>) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config {
        data_dir: dir.path().join("data"),
        ..Config::default()
    };
    cfg.s3.listen = "127.0.0.1:0".into();
    cfg.engine.set_kind(kind).unwrap();
    cfg.engine.insecure_direct = true;
    cfg.engine.capacity_blocks = 2048;
    cfg.engine.block_size = 1024;
    let k = &mut cfg.engine.kind;
    if let Some(s) = k.get_mut::<oram_path::PathSettings>() {
        s.cached_levels = Some(3);
    } else if let Some(s) = k.get_mut::<oram_ring::RingSettings>() {
        s.cached_levels = Some(3);
    } else if let Some(s) = k.get_mut::<oram_curious::CuriousSettings>() {
        s.cached_levels = Some(1);
    }
    // ObliviStore and direct keep no tree: their blocks are all on the backend.
    // Objects (< 20 000 bytes) fit one batch of 32 blocks: a GET fetches them
    // before it answers. A larger object's later batches can still fail mid-body
    // (the connection is cut; never a wrong byte): SECURITY.md says so.
    cfg.engine.max_batch = 32;
    cfg.backend.fsync = false;
    cfg.state.checkpoint_interval_secs = 0;
    cfg.users = vec![UserConfig {
        access_key: "fault".into(),
        secret_key: "fault-secret".into(),
    }];
    let plan = if faults {
        // Ring ORAM sends one ranged GET per bucket of a path, each its own call:
        // the same odds per call would fail nearly every round.
        FaultPlan::all(
            seed,
            match kind {
                // Rounds of many requests (Ring's ranged GETs; a CURIOUS round's
                // every partition): a lower rate lets enough of them through.
                "ring" => 0.0025,
                "curious" => 0.005,
                // An ObliviStore access is a ranged GET per filled level and
                // per slot its shuffle reads, in every partition of the round.
                "oblivistore" => 0.0025,
                _ => 0.03,
            },
        )
    } else {
        FaultPlan::default()
    };
    /// The fault store and the recorder the hook built, once it has run.
    type Wrapped = (Arc<FaultStore<Arc<dyn BlockStore>>>, Arc<Rec>);
    let slot: Arc<Mutex<Option<Wrapped>>> = Arc::default();
    let hook_slot = slot.clone();
    let hooks = VolumeHooks {
        wrap_backend: Some(Arc::new(move |inner: Arc<dyn BlockStore>| {
            let f = Arc::new(FaultStore::new(Arc::new(inner), plan.clone()));
            // Faults start once the volume is open (a start that fails is not the
            // battery's subject; `start` refuses to serve a backend it cannot open).
            f.set_enabled(false);
            let rec = Arc::new(Recording::new(f.clone()));
            *hook_slot.lock().unwrap() = Some((f, rec.clone()));
            rec as Arc<dyn BlockStore>
        })),
        ..VolumeHooks::default()
    };
    let server = oram_proxy::start_with_hooks(&cfg, None, hooks)
        .await
        .expect("proxy starts");
    let (fault, rec) = slot.lock().unwrap().clone().expect("the hook ran");
    let c = client(&format!("http://{}", server.s3_addr()));
    c.create_bucket().bucket("battery").send().await.unwrap();
    rec.take_trace();
    fault.set_enabled(true);

    // The model: the states each key may be in (None: absent).
    let mut allowed: Vec<HashSet<Option<Vec<u8>>>> = vec![HashSet::from([None]); KEYS];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut t = Tally::default();
    for i in 0..OPS {
        let k = rng.gen_range(0..KEYS);
        let key = format!("obj-{k}");
        let r: f64 = rng.gen();
        t.requests += 1;
        if r < 0.45 {
            let len = rng.gen_range(0..20_000);
            let data: Vec<u8> = (0..len)
                .map(|j| (j as u64 * 7 + i as u64 * 13 + seed) as u8)
                .collect();
            match c
                .put_object()
                .bucket("battery")
                .key(&key)
                .body(ByteStream::from(data.clone()))
                .send()
                .await
            {
                Ok(_) => {
                    t.acknowledged += 1;
                    allowed[k] = HashSet::from([Some(data)]);
                }
                Err(e) => {
                    match classify(&e) {
                        Ok(()) => t.failed_503 += 1,
                        Err(m) => t.unclean.push(format!("PUT {key}: {m}")),
                    }
                    allowed[k].insert(Some(data));
                }
            }
        } else if r < 0.55 {
            match c.delete_object().bucket("battery").key(&key).send().await {
                Ok(_) => {
                    t.acknowledged += 1;
                    allowed[k] = HashSet::from([None]);
                }
                Err(e) => {
                    match classify(&e) {
                        Ok(()) => t.failed_503 += 1,
                        Err(m) => t.unclean.push(format!("DELETE {key}: {m}")),
                    }
                    allowed[k].insert(None);
                }
            }
        } else {
            match c.get_object().bucket("battery").key(&key).send().await {
                Ok(out) => match out.body.collect().await {
                    Ok(b) => {
                        t.reads_checked += 1;
                        let got = Some(b.into_bytes().to_vec());
                        if allowed[k].contains(&got) {
                            allowed[k] = HashSet::from([got]);
                        } else {
                            t.wrong_bytes += got.as_ref().map_or(0, |g| g.len() as u64).max(1);
                        }
                    }
                    Err(e) => t.unclean.push(format!("GET {key}: body cut: {e}")),
                },
                Err(aws_sdk_s3::error::SdkError::ServiceError(se)) if se.err().is_no_such_key() => {
                    t.reads_checked += 1;
                    if allowed[k].contains(&None) {
                        allowed[k] = HashSet::from([None]);
                    } else {
                        t.wrong_bytes += 1;
                        t.unclean
                            .push(format!("GET {key}: absent, but its write was acknowledged"));
                    }
                }
                Err(e) => match classify(&e) {
                    Ok(()) => t.failed_503 += 1,
                    Err(m) => t.unclean.push(format!("GET {key}: {m}")),
                },
            }
        }
    }
    // Faults off, late PUTs landed: every key must be in one of its states.
    fault.set_enabled(false);
    fault.settle().await;
    let counts = fault.counts();
    for (k, states) in allowed.iter().enumerate() {
        let key = format!("obj-{k}");
        let got = match c.get_object().bucket("battery").key(&key).send().await {
            Ok(out) => Some(out.body.collect().await.unwrap().into_bytes().to_vec()),
            Err(aws_sdk_s3::error::SdkError::ServiceError(se)) if se.err().is_no_such_key() => None,
            Err(e) => panic!("{kind}: final GET {key} failed with faults off: {e:?}"),
        };
        t.reads_checked += 1;
        if !states.contains(&got) {
            t.wrong_bytes += 1;
            t.unclean
                .push(format!("final {key}: not in any allowed state"));
        }
    }
    let shape = shape(&rec.trace());
    server
        .shutdown(std::time::Duration::from_secs(10))
        .await
        .expect("clean shutdown after the battery");
    let rep = oram_proxy::fsck(&cfg, &|_, _, _| {}).await.unwrap();
    assert!(rep.is_clean(), "{kind}: fsck after the battery: {rep:?}");
    (t, counts, shape)
}

/// The battery on engine `kind` (the `i`-th of `ENGINES`): its summary line.
async fn battery(i: usize, kind: &str) -> String {
    battery_seeded(kind, 1000 + i as u64).await
}

/// The battery on engine `kind` with the faults and workload of `seed`.
async fn battery_seeded(kind: &str, seed: u64) -> String {
    let (clean, _, clean_shape) = run(kind, false, seed).await;
    assert!(
        clean.unclean.is_empty() && clean.failed_503 == 0,
        "{kind} without faults: {clean:?}"
    );
    let (t, counts, shape) = run(kind, true, seed).await;
    let line = format!(
        "fault battery {kind}: {} client requests ({} acknowledged, {} clean 503s), {} reads \
         checked, {} faults injected over {} backend requests ({counts:?}), wrong bytes {}",
        t.requests,
        t.acknowledged,
        t.failed_503,
        t.reads_checked,
        counts.injected(),
        counts.requests,
        t.wrong_bytes
    );
    println!("{line}");
    assert_eq!(t.wrong_bytes, 0, "{line}");
    assert!(
        t.unclean.is_empty(),
        "{kind}: failures that were not a clean 503: {:#?}",
        t.unclean
    );
    assert!(
        counts.injected() >= 15,
        "too few faults to mean anything: {line}"
    );
    // Enough acknowledged writes for the model check to mean something. Ring ORAM
    // acknowledges fewer (about 40 of 160, Path about 85): its rounds are many
    // ranged GETs, each of which may draw a fault, and a round the backend
    // interrupted is repeated as the same access before anything new
    // (SECURITY.md, "Obliviousness under failures"), within the engine's
    // round attempts and then by the next request. The client makes one
    // attempt per request.
    assert!(
        t.failed_503 > 0 && t.acknowledged >= OPS as u64 / 8,
        "{line}"
    );
    let extra: BTreeMap<_, _> = shape
        .difference(&clean_shape)
        .map(|s| (s.clone(), ()))
        .collect();
    assert!(
        extra.is_empty(),
        "{kind}: under faults the engine sent requests of shapes it never sends otherwise: {:?}",
        extra.keys().collect::<Vec<_>>()
    );
    line
}

/// Writes the battery's summary lines to `$CARGO_TARGET_DIR/fault-battery-summary.txt`
/// (after what is there with `append`).
fn summary(lines: &[String], append: bool) {
    use std::io::Write;
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(std::path::Path::new(&target).join("fault-battery-summary.txt"))
    {
        let _ = f.write_all((lines.join("\n") + "\n").as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_engine_survives_the_fault_battery() {
    let mut lines = Vec::new();
    for (i, &kind) in ENGINES.iter().enumerate() {
        lines.push(battery(i, kind).await);
    }
    summary(&lines, false);
}

/// The battery over more seeds, by hand (long):
/// `ORAM_FAULT_SEEDS=20 ORAM_FAULT_ENGINES=oblivistore cargo test -p oram-tests
/// --test faults -- --ignored more_seeds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: the battery over ORAM_FAULT_SEEDS seeds of ORAM_FAULT_ENGINES, by hand"]
async fn more_seeds_of_the_battery() {
    let seeds: u64 = std::env::var("ORAM_FAULT_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let only = std::env::var("ORAM_FAULT_ENGINES").unwrap_or_default();
    let mut lines = Vec::new();
    for &kind in ENGINES {
        if !only.is_empty() && !only.split(',').any(|k| k == kind) {
            continue;
        }
        for s in 0..seeds {
            lines.push(battery_seeded(kind, 5000 + s).await);
        }
    }
    summary(&lines, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_conditional_writes_a_late_put_replaces_a_newer_version() {
    // The negative control of the late-PUT fault: with unconditional late
    // landings (a store without If-Match), an older bucket version lands over a
    // newer one and the engine's freshness check then refuses it — the harm the
    // S3 back-end's conditional writes prevent.
    use bytes::Bytes;
    use oram_blockstore::ObjKey;
    let mem: Arc<dyn BlockStore> = Arc::new(oram_store_memory::MemoryStore::new());
    let mut plan = FaultPlan {
        late_put: 1.0,
        late_delay: std::time::Duration::from_millis(30),
        ..FaultPlan::default()
    };
    let k = ObjKey::new("v/n/1").unwrap();
    for unconditional in [true, false] {
        plan.late_put_unconditional = unconditional;
        let f = FaultStore::new(Arc::new(mem.clone()), plan.clone());
        mem.put_many(vec![(k.clone(), Bytes::from_static(b"v1"))])
            .await
            .unwrap();
        // v2 times out and lands later; v3 is written meanwhile.
        assert!(f
            .put_many(vec![(k.clone(), Bytes::from_static(b"v2"))])
            .await
            .is_err());
        mem.put_many(vec![(k.clone(), Bytes::from_static(b"v3"))])
            .await
            .unwrap();
        f.settle().await;
        let now = mem.get_many(std::slice::from_ref(&k)).await.unwrap();
        let want: &[u8] = if unconditional { b"v2" } else { b"v3" };
        assert_eq!(
            now[0].as_deref(),
            Some(want),
            "unconditional = {unconditional}"
        );
        assert_eq!(f.counts().late_refused, u64::from(!unconditional));
    }
}
