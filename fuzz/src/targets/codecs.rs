//! Targets of the byte codecs below the object layer: sealed objects, the trusted
//! state's value encodings and rows, intent records, Path and Ring bucket
//! formats, and state snapshots (a checkpoint's plaintext).

use std::sync::Arc;

use bytes::Bytes;
use oram_path::bucket::{decode_bucket as path_decode, encode_bucket as path_encode};
use oram_ring::layout::{decode_header, decode_slot, Layout, Meta};
use oram_ring::RingParams;
use oram_seal::{MasterKey, ObjectIdentity, ObjectKind, Sealer, VolumeId};
use oram_state::{
    decode_bucket, decode_node, decode_pending, encode_bucket, encode_node, encode_pending,
    Lineage, NodeVersion, Space, SpaceState, Table,
};
use oram_tree::{Geometry, Intent};

/// The fixed key and volume of the targets that seal (`[7; 32]`, `[1; 16]`).
pub fn sealer() -> Sealer {
    Sealer::new(&MasterKey::from_bytes([7; 32]), VolumeId([1; 16]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    for (i, v) in x.iter_mut().enumerate() {
        *v = b.get(at + i).copied().unwrap_or(0);
    }
    u64::from_be_bytes(x)
}

/// `Sealer::open` of a sealed object: input `kind (1) ‖ position (8 BE) ‖ version
/// (8 BE) ‖ sealed object`.
pub fn seal_open(data: &[u8]) -> bool {
    let kind = match data.first().map(|k| k % 4) {
        Some(0) => ObjectKind::TreeBucket,
        Some(1) => ObjectKind::DirectBlock,
        Some(2) => ObjectKind::RingSlot,
        _ => ObjectKind::Meta,
    };
    let id = ObjectIdentity::plain(kind, u64_at(data, 1), u64_at(data, 9));
    let sealed = data.get(17..).unwrap_or_default();
    sealer().open(&id, sealed).is_ok()
}

/// Seeds of [`seal_open`]: objects of every kind and a few sizes.
pub fn seal_open_seeds() -> Vec<Vec<u8>> {
    let s = sealer();
    let mut out = Vec::new();
    for (k, kind) in [
        ObjectKind::TreeBucket,
        ObjectKind::DirectBlock,
        ObjectKind::RingSlot,
        ObjectKind::Meta,
    ]
    .into_iter()
    .enumerate()
    {
        for (n, len) in [0usize, 24, 1000].into_iter().enumerate() {
            let (pos, ver) = (k as u64 * 10 + n as u64, 3u64);
            let sealed = s
                .seal(&ObjectIdentity::plain(kind, pos, ver), &vec![n as u8; len])
                .expect("seals");
            let mut v = vec![k as u8];
            v.extend_from_slice(&pos.to_be_bytes());
            v.extend_from_slice(&ver.to_be_bytes());
            v.extend_from_slice(&sealed);
            out.push(v);
        }
    }
    out
}

/// The trusted state's value codecs: input `which (1) ‖ value`, `which` % 3 picks
/// a node version, a local bucket or a journal entry.
pub fn state_values(data: &[u8]) -> bool {
    let Some((&which, v)) = data.split_first() else {
        return false;
    };
    match which % 3 {
        0 => decode_node(v).is_ok(),
        1 => decode_bucket(v).is_ok(),
        _ => decode_pending(v).is_ok(),
    }
}

fn nv() -> NodeVersion {
    NodeVersion {
        version: 9,
        slot: 3,
        epoch: 1 << 33,
        generation: 0x1234_5678_9abc,
        base: 1,
    }
}

/// Seeds of [`state_values`].
pub fn state_values_seeds() -> Vec<Vec<u8>> {
    let bucket = vec![(5u64, Bytes::from(vec![1u8; 64])), (u64::MAX, Bytes::new())];
    vec![
        [&[0u8][..], &encode_node(&nv())].concat(),
        [&[1u8][..], &encode_bucket(&bucket)].concat(),
        [&[1u8][..], &encode_bucket(&Vec::new())].concat(),
        [&[2u8][..], &encode_pending(&nv(), &[9u8; 100])].concat(),
    ]
}

const TABLES: [Table; 9] = Table::ALL;

/// Rows of an engine space as read from the state database
/// (`SpaceState::from_rows`): input a sequence of `table (1) ‖ key length (1) ‖
/// key ‖ value length (2 BE) ‖ value`.
pub fn state_rows(data: &[u8]) -> bool {
    let mut rows = Vec::new();
    let mut b = data;
    while let Some((&t, rest)) = b.split_first() {
        let Some((&kl, rest)) = rest.split_first() else {
            break;
        };
        let kl = usize::from(kl).min(rest.len());
        let (k, rest) = rest.split_at(kl);
        if rest.len() < 2 {
            break;
        }
        let vl = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let v = &rest[2..2 + vl];
        rows.push((
            TABLES[usize::from(t) % TABLES.len()],
            k.to_vec(),
            v.to_vec(),
        ));
        b = &rest[2 + vl..];
    }
    SpaceState::from_rows(Space(0), Arc::new(Lineage::new(0, 1)), None, rows).is_ok()
}

fn row(out: &mut Vec<u8>, t: Table, k: &[u8], v: &[u8]) {
    let i = TABLES.iter().position(|x| *x == t).expect("a table") as u8;
    out.push(i);
    out.push(k.len() as u8);
    out.extend_from_slice(k);
    out.extend_from_slice(&(v.len() as u16).to_be_bytes());
    out.extend_from_slice(v);
}

/// Seeds of [`state_rows`]: one row of every engine table, and all together.
pub fn state_rows_seeds() -> Vec<Vec<u8>> {
    let bucket = vec![(5u64, Bytes::from(vec![1u8; 16]))];
    let intent = Intent {
        blocks: vec![Some(1), None],
        draws: vec![3, 4],
        attempt: 1,
        seed: [9; 32],
    }
    .encode();
    let rows: Vec<(Table, Vec<u8>, Vec<u8>)> = vec![
        (
            Table::Positions,
            3u64.to_be_bytes().to_vec(),
            7u64.to_be_bytes().to_vec(),
        ),
        (
            Table::Nodes,
            4u64.to_be_bytes().to_vec(),
            encode_node(&nv()),
        ),
        (Table::Stash, 5u64.to_be_bytes().to_vec(), vec![2u8; 16]),
        (
            Table::Local,
            1u64.to_be_bytes().to_vec(),
            encode_bucket(&bucket),
        ),
        (Table::KeyMeta, b"k".to_vec(), b"v".to_vec()),
        (
            Table::Pending,
            6u64.to_be_bytes().to_vec(),
            encode_pending(&nv(), &[1; 32]),
        ),
        (Table::Intent, Vec::new(), intent.to_vec()),
        (Table::Intent, 2u64.to_be_bytes().to_vec(), intent.to_vec()),
    ];
    let mut out: Vec<Vec<u8>> = rows
        .iter()
        .map(|(t, k, v)| {
            let mut s = Vec::new();
            row(&mut s, *t, k, v);
            s
        })
        .collect();
    let mut all = Vec::new();
    for (t, k, v) in &rows {
        row(&mut all, *t, k, v);
    }
    out.push(all);
    out
}

/// `Intent::decode` of an intent record.
pub fn intent(data: &[u8]) -> bool {
    Intent::decode(data, || [0; 32]).is_ok()
}

/// The shipped log's group decoder (`oram_statedb::decode_groups`) on a stream.
pub fn log_groups(data: &[u8]) -> bool {
    oram_statedb::decode_groups(data).is_ok_and(|(_, used)| used == data.len())
}

/// Seeds of [`log_groups`]: two groups of assorted writes, and an empty one.
pub fn log_groups_seeds() -> Vec<Vec<u8>> {
    use oram_state::{ChangeSet, Table};
    let mut a = ChangeSet::default();
    a.push(Table::Positions, vec![0, 0, 0, 0, 1], Some(vec![9; 8]));
    a.push(Table::Stash, vec![0, 0, 0, 0, 2], Some(vec![7; 40]));
    a.push(Table::Kv, b"o/b\0k".to_vec(), None);
    let mut b = ChangeSet::default();
    b.push(Table::Meta, b"epoch".to_vec(), Some(vec![0; 8]));
    let mut two = oram_statedb::encode_group(&[&a]);
    two.extend(oram_statedb::encode_group(&[&b, &a]));
    vec![two, oram_statedb::encode_group(&[&ChangeSet::default()])]
}

/// Seeds of [`intent`]: the three formats.
pub fn intent_seeds() -> Vec<Vec<u8>> {
    let i = Intent {
        blocks: vec![Some(0), None, Some(u64::MAX - 1), Some(300)],
        draws: vec![0, 127, 128, 1 << 40, u64::MAX],
        attempt: 300,
        seed: [0x5a; 32],
    };
    vec![
        i.encode().to_vec(),
        Intent::default().encode().to_vec(),
        vec![1, 2, 1, 0, 1, 5],
        vec![2, 4, 2, 1, 0, 1, 5],
    ]
}

fn path_geo() -> Geometry {
    Geometry::new(64, 4, 16, None)
}

/// Path ORAM's bucket decoder on a bucket plaintext (z = 4, 16-byte blocks).
pub fn path_bucket(data: &[u8]) -> bool {
    path_decode(&path_geo(), &Bytes::copy_from_slice(data)).is_ok()
}

/// Seeds of [`path_bucket`]: an empty, a partly and a fully used bucket.
pub fn path_bucket_seeds() -> Vec<Vec<u8>> {
    let g = path_geo();
    let blocks: Vec<(u64, Bytes)> = (0..4)
        .map(|i| (i * 7, Bytes::from(vec![i as u8; 16])))
        .collect();
    vec![
        path_encode(&g, &[]).to_vec(),
        path_encode(&g, &blocks[..2]).to_vec(),
        path_encode(&g, &blocks).to_vec(),
    ]
}

fn ring_layout() -> Layout {
    let params = RingParams { z: 4, s: 5, a: 3 };
    Layout {
        geo: Geometry::new(64, params.z, 16, None),
        params,
        block_size: 16,
    }
}

/// Ring ORAM's decoders: input `which (1) ‖ bytes`; `which` % 4 picks the slot
/// map alone, the slot map and read state (split at the slot map's length), the
/// bucket header, or a slot.
pub fn ring_layout_target(data: &[u8]) -> bool {
    let lay = ring_layout();
    let Some((&which, v)) = data.split_first() else {
        return false;
    };
    let slots = lay.slots();
    match which % 4 {
        0 => Meta::decode(v, None, slots).is_ok(),
        1 => {
            let cut = (8 * slots).min(v.len());
            Meta::decode(&v[..cut], Some(&v[cut..]), slots).is_ok()
        }
        2 => decode_header(&lay, v).is_ok(),
        _ => decode_slot(&lay, &Bytes::copy_from_slice(v)).is_ok(),
    }
}

/// Seeds of [`ring_layout_target`].
pub fn ring_layout_seeds() -> Vec<Vec<u8>> {
    let lay = ring_layout();
    let mut meta = Meta::fresh(lay.slots());
    meta.ids[2] = 77;
    meta.mark_read(4);
    let header: Vec<u8> = (0..lay.slots() as u64)
        .flat_map(|i| [i.to_le_bytes(), (i * 3).to_le_bytes()].concat())
        .collect();
    let mut slot = 77u64.to_le_bytes().to_vec();
    slot.extend_from_slice(&[5u8; 16]);
    vec![
        [&[0u8][..], &meta.encode_ids()].concat(),
        [&[1u8][..], &meta.encode_ids(), &meta.encode_reads()].concat(),
        [&[2u8][..], &header].concat(),
        [&[3u8][..], &slot].concat(),
    ]
}
