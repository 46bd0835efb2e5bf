//! Path ORAM's bucket format: `z` fixed-size slots of an 8-byte block id and a
//! block, so every bucket has the same size whatever it holds. Pure, tested
//! directly.

use bytes::{BufMut, Bytes};
use oram_state::Bucket;
use oram_tree::Geometry;

/// Slot id marking an empty slot in an encoded bucket.
pub const EMPTY_SLOT: u64 = u64::MAX;

/// Size of an encoded bucket: `z` slots of an 8-byte id and a block.
pub fn bucket_bytes(geo: &Geometry) -> usize {
    geo.z * (8 + geo.block_size)
}

/// Encodes a bucket as `z` fixed-size slots (empty slots are id `EMPTY_SLOT` and
/// zeros).
pub fn encode_bucket(geo: &Geometry, bucket: &[(u64, Bytes)]) -> Bytes {
    assert!(bucket.len() <= geo.z, "bucket over capacity");
    let mut out = Vec::with_capacity(bucket_bytes(geo));
    for (id, data) in bucket {
        debug_assert_eq!(data.len(), geo.block_size);
        out.put_u64_le(*id);
        out.extend_from_slice(data);
    }
    for _ in bucket.len()..geo.z {
        out.put_u64_le(EMPTY_SLOT);
        out.resize(out.len() + geo.block_size, 0);
    }
    out.into()
}

/// Decodes a bucket; `Err` describes a malformed encoding.
pub fn decode_bucket(geo: &Geometry, plain: &Bytes) -> Result<Bucket, String> {
    if plain.len() != bucket_bytes(geo) {
        return Err(format!(
            "bucket has {} bytes, expected {}",
            plain.len(),
            bucket_bytes(geo)
        ));
    }
    let slot = 8 + geo.block_size;
    let mut out = Vec::new();
    for i in 0..geo.z {
        let s = i * slot;
        let id = u64::from_le_bytes(plain[s..s + 8].try_into().expect("8 bytes"));
        if id != EMPTY_SLOT {
            out.push((id, plain.slice(s + 8..s + slot)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_codec_round_trips_at_fixed_size() {
        let g = Geometry::new(64, 4, 16, None);
        let b: Bucket = vec![
            (3, Bytes::from(vec![1u8; 16])),
            (9, Bytes::from(vec![2u8; 16])),
        ];
        let enc = encode_bucket(&g, &b);
        assert_eq!(enc.len(), bucket_bytes(&g));
        assert_eq!(encode_bucket(&g, &[]).len(), bucket_bytes(&g));
        assert_eq!(decode_bucket(&g, &enc).unwrap(), b);
        assert!(decode_bucket(&g, &enc.slice(1..)).is_err());
    }
}
