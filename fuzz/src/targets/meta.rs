//! Targets of the proxy's own backend objects (checkpoint, volume header, lease),
//! of state snapshots and of the object layer's index values.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use oram_engine::{Op, Oram};
use oram_objects::records::{
    AccountRecord, BucketRecord, ObjectMeta, ObjectRecord, PartRecord, Segment, UploadRecord,
};
use oram_objects::{alloc::Run, LayerConfig, ListParams, ObjectLayer};
use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_seal::{MasterKey, VolumeId};
use oram_state::{KvMap, MemState, Space};
use oram_statedb::Db;
use oram_store_memory::MemoryStore;
use oram_volume::header::{
    checkpoint_object, header_is_authentic, open_checkpoint, parse_prefix, sign_header, Owner,
    MAGIC_V1,
};
use oram_volume::key::Kdf;
use oram_volume::VolumeConfig;
use oram_volume::VolumeParams;

use super::codecs::sealer;
use super::runtime;

/// A checkpoint object as `recover` and the start-up check read it: the prefix
/// (`parse_prefix`), then the whole object (`open_checkpoint`).
pub fn checkpoint(data: &[u8]) -> bool {
    let s = sealer();
    let _ = parse_prefix(&s, Owner::Node(2), data);
    let _ = open_checkpoint(&s, Owner::Node(2), data);
    let _ = parse_prefix(&s, Owner::Volume, data);
    open_checkpoint(&s, Owner::Volume, data).is_ok()
}

/// Seeds of [`checkpoint`]: both formats, two sizes.
pub fn checkpoint_seeds() -> Vec<Vec<u8>> {
    let s = sealer();
    let mut out = Vec::new();
    for (epoch, plain) in [(3u64, vec![1u8; 10]), (u64::MAX - 1, vec![2u8; 3000])] {
        let sealed = s
            .seal(&Owner::Volume.snapshot_identity(epoch), &plain)
            .expect("seals");
        out.push(
            checkpoint_object(&s, Owner::Volume, epoch, plain.len() as u64, &sealed)
                .expect("builds"),
        );
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&epoch.to_be_bytes());
        v1.extend_from_slice(&sealed);
        out.push(v1);
    }
    out
}

fn header_key() -> MasterKey {
    MasterKey::from_bytes([7; 32])
}

/// The volume header as `recover` reads it before it knows the key: TOML
/// (`VolumeParams::from_toml`), the parameters adopted into a configuration, the
/// key-derivation bounds, the volume id, then the MAC.
pub fn volume_header(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(p) = VolumeParams::from_toml(text, "fuzz") else {
        return false;
    };
    let mut cfg = VolumeConfig::default();
    if p.adopt_into(&mut cfg.engine).is_err() {
        return false;
    }
    if let Some(kdf) = &p.kdf {
        if kdf.check_bounds().is_err() {
            return false;
        }
    }
    p.volume_id().is_ok() && header_is_authentic(&header_key(), &p)
}

/// Seeds of [`volume_header`]: signed headers with and without a passphrase KDF.
pub fn volume_header_seeds() -> Vec<Vec<u8>> {
    let cfg = VolumeConfig::default();
    let plain = VolumeParams::new(&cfg, &VolumeId([1; 16]), "file", "ab".repeat(16), None);
    let kdf = Kdf {
        salt: "cd".repeat(16),
        ..Kdf::generate()
    };
    let with_kdf = VolumeParams::new(
        &cfg,
        &VolumeId([2; 16]),
        "passphrase",
        "ef".repeat(16),
        Some(kdf),
    );
    [plain, with_kdf]
        .iter()
        .map(|p| sign_header(&header_key(), p).to_toml().into_bytes())
        .collect()
}

/// Inputs of [`volume_header`] that must fail without a panic: the header that
/// overflowed Path's round size (a huge `z`, adopted before the MAC check).
pub fn volume_header_extra() -> Vec<Vec<u8>> {
    let cfg = VolumeConfig::default();
    let p = VolumeParams::new(&cfg, &VolumeId([2; 16]), "file", "ef".repeat(16), None);
    let text = sign_header(&header_key(), &p).to_toml();
    let huge = text.replacen("[fixed]\n", "[fixed]\nz = \"20202020202020204\"\n", 1);
    let huge = huge.replacen("z = \"4\"\n", "", 1);
    assert!(
        huge.contains("z = \"20202020202020204\"") && !huge.contains("z = \"4\""),
        "the header's [fixed] table changed: {huge}"
    );
    vec![huge.into_bytes()]
}

/// The lease object as a start reads it (`lease::inspect`: parse, wait, next
/// generation), and the deadline it computes from the wait.
pub fn lease(data: &[u8]) -> bool {
    let f = oram_volume::lease::inspect(
        data,
        "0123456789abcdef0123456789abcdef",
        Duration::from_secs(30),
    );
    let _deadline = std::time::Instant::now() + f.wait + Duration::from_secs(1);
    f.who != "unreadable"
}

/// Seeds of [`lease`]: records of another holder, ours, a released one, and one
/// with the largest integers TOML holds.
pub fn lease_seeds() -> Vec<Vec<u8>> {
    [
        ("fedcba9876543210fedcba9876543210", 4, 17, 30, false),
        ("0123456789abcdef0123456789abcdef", 1, 0, 30, false),
        ("fedcba9876543210fedcba9876543210", 9, 3, 600, true),
        // The largest TOML integer everywhere (the lease fix's regression seed).
        ("fedcba9876543210fedcba9876543210", i64::MAX, i64::MAX, i64::MAX, false),
    ]
    .iter()
    .map(|(h, g, r, l, rel)| {
        format!(
            "holder = \"{h}\"\ngeneration = {g}\nrenewals = {r}\nlease_secs = {l}\nreleased = {rel}\n"
        )
        .into_bytes()
    })
    .collect()
}

fn small_path(store: Arc<MemoryStore>, state: Box<dyn oram_state::TrustedState>) -> PathOram {
    PathOram::new(
        PathConfig {
            tree: TreeConfig {
                capacity: 64,
                block_size: 64,
                cached_levels: 1,
                ..PathConfig::default().tree
            },
            ..PathConfig::default()
        },
        store,
        Arc::new(sealer()),
        state,
    )
    .expect("a valid configuration")
}

/// A state snapshot (a checkpoint's plaintext) restored into a new database
/// (`Db::restore`), then read back as the start does: the engine space
/// (`Db::state`), the object index (`Db::kv`) and the metadata.
pub fn snapshot(data: &[u8]) -> bool {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let Ok(db) = Db::restore(&dir.path().join("state.redb"), [1; 16], data) else {
        return false;
    };
    let _ = db.meta("checkpoint_ms");
    db.state(Space(0)).is_ok() && db.kv().is_ok()
}

/// Seeds of [`snapshot`]: the snapshot of a database after a Path ORAM wrote to
/// it (positions, nodes, stash, local buckets), and of an empty one.
pub fn snapshot_seeds() -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = Db::open(&dir.path().join("state.redb"), [1; 16]).expect("opens");
    let empty = db.snapshot().expect("snapshots");
    let engine = small_path(
        Arc::new(MemoryStore::new()),
        Box::new(db.state(Space(0)).expect("a space")),
    );
    runtime().block_on(async {
        for round in 0..4u8 {
            let ops = (0..8u64)
                .map(|b| Op::Write(b * 5 + u64::from(round), Bytes::from(vec![round; 64])))
                .collect();
            engine.access(ops).await.expect("writes");
        }
        engine.flush().await.expect("flushes");
    });
    drop(engine);
    vec![db.snapshot().expect("snapshots"), empty]
}

const OWNER: &str = "alice";
const BUCKET: &str = "bkt";

fn bucket_record() -> BucketRecord {
    BucketRecord {
        name: BUCKET.into(),
        owner: OWNER.into(),
        created_ms: 1,
        meta: BTreeMap::new(),
        meta_modified_ms: 0,
        sysmeta: BTreeMap::new(),
        lifecycle: Vec::new(),
        versioning: Default::default(),
        tags: BTreeMap::new(),
        object_lock: None,
        public_access_block: None,
        policy: None,
    }
}

fn object_record() -> ObjectRecord {
    ObjectRecord {
        id: 4,
        size: 150,
        etag: "0123456789abcdef0123456789abcdef".into(),
        modified_ms: 1_700_000_000_000,
        meta: ObjectMeta {
            content_type: Some("text/plain".into()),
            user: [("k".to_string(), "v".to_string())].into(),
            ..ObjectMeta::default()
        },
        segments: vec![
            Segment {
                runs: vec![Run { start: 2, len: 2 }],
                len: 100,
            },
            Segment {
                runs: vec![Run { start: 10, len: 1 }],
                len: 50,
            },
        ],
        delete_at: 0,
        ..ObjectRecord::default()
    }
}

fn upload_record() -> UploadRecord {
    UploadRecord {
        bucket: BUCKET.into(),
        key: "up".into(),
        owner: OWNER.into(),
        initiated_ms: 5,
        meta: ObjectMeta::default(),
        parts: [(
            1u32,
            PartRecord {
                etag: "00".repeat(16),
                size: 64,
                modified_ms: 6,
                segment: Segment {
                    runs: vec![Run { start: 20, len: 1 }],
                    len: 64,
                },
            },
        )]
        .into(),
        tags: BTreeMap::new(),
        lock: Default::default(),
    }
}

/// An object-layer index value as the layer reads it from the state database:
/// input `which (1) ‖ JSON value`; `which` % 4 puts it at an object, bucket,
/// upload or account key beside valid records of the others. The layer is then
/// opened over that index (its allocation check decodes every object and upload)
/// and the object is listed, headed and read to the end.
pub fn index(data: &[u8]) -> bool {
    let Some((&which, value)) = data.split_first() else {
        return false;
    };
    let object_key = format!("o/{OWNER}\0{BUCKET}\0obj").into_bytes();
    let mut map: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    map.insert(
        format!("b/{OWNER}\0{BUCKET}").into_bytes(),
        json(&bucket_record()),
    );
    map.insert(format!("n/{BUCKET}\0{OWNER}").into_bytes(), Vec::new());
    map.insert(object_key.clone(), json(&object_record()));
    map.insert(b"u/upload1".to_vec(), json(&upload_record()));
    map.insert(
        format!("a/{OWNER}").into_bytes(),
        json(&AccountRecord::default()),
    );
    let key = match which % 4 {
        0 => object_key,
        1 => format!("b/{OWNER}\0{BUCKET}").into_bytes(),
        2 => b"u/upload1".to_vec(),
        _ => format!("a/{OWNER}").into_bytes(),
    };
    map.insert(key, value.to_vec());
    let engine = small_path(Arc::new(MemoryStore::new()), Box::new(MemState::new()));
    let Ok(layer) = ObjectLayer::new(
        Arc::new(engine),
        Box::new(KvMap::with_sink(map, None)),
        LayerConfig::default(),
    ) else {
        return false;
    };
    let _ = layer.list_buckets(OWNER);
    let _ = layer.account_meta(OWNER);
    let _ = layer.list_uploads(OWNER, BUCKET, "");
    let _ = layer.list_objects(
        OWNER,
        BUCKET,
        &ListParams {
            prefix: String::new(),
            delimiter: Some("/".into()),
            start_after: None,
            max_keys: 10,
        },
    );
    let Ok(obj) = layer.open_object(OWNER, BUCKET, "obj") else {
        return false;
    };
    let Ok(mut stream) = layer.read(obj, None) else {
        return false;
    };
    runtime().block_on(async {
        let mut ok = true;
        while let Some(chunk) = stream.next().await {
            ok &= chunk.is_ok();
        }
        ok
    })
}

/// Seeds of [`index`]: the valid record at each of the four keys.
pub fn index_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let values: [Vec<u8>; 4] = [
        serde_json::to_vec(&object_record()).expect("serialises"),
        serde_json::to_vec(&bucket_record()).expect("serialises"),
        serde_json::to_vec(&upload_record()).expect("serialises"),
        serde_json::to_vec(&AccountRecord {
            meta: [("quota".to_string(), "1".to_string())].into(),
        })
        .expect("serialises"),
    ];
    for (i, v) in values.into_iter().enumerate() {
        out.push([&[i as u8][..], &v].concat());
    }
    out
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("serialises")
}
