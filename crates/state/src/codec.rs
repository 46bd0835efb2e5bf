//! The byte encoding of the durable tables' values (the keys are big-endian
//! integers or engine-chosen bytes behind the space, see [`crate::Table`]).

use bytes::Bytes;

use crate::{Bucket, NodeVersion, StateError};

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A node version as 24 bytes: version, generation, `epoch << 8 | base << 4 | slot`.
pub fn encode_node(nv: &NodeVersion) -> Vec<u8> {
    let mut v = Vec::with_capacity(24);
    v.extend_from_slice(&nv.version.to_be_bytes());
    v.extend_from_slice(&nv.generation.to_be_bytes());
    let packed = (nv.epoch << 8) | (u64::from(nv.base & 0xf) << 4) | u64::from(nv.slot & 0xf);
    v.extend_from_slice(&packed.to_be_bytes());
    v
}

/// The inverse of [`encode_node`].
pub fn decode_node(b: &[u8]) -> Result<NodeVersion, StateError> {
    if b.len() != 24 {
        return Err(StateError::Corrupt("node version of the wrong size".into()));
    }
    let packed = u64_at(b, 16);
    Ok(NodeVersion {
        version: u64_at(b, 0),
        generation: u64_at(b, 8),
        epoch: packed >> 8,
        base: ((packed >> 4) & 0xf) as u8,
        slot: (packed & 0xf) as u8,
    })
}

/// A bucket as `id (8) ‖ len (4) ‖ data` per block.
pub fn encode_bucket(bucket: &Bucket) -> Vec<u8> {
    let mut v = Vec::new();
    for (id, data) in bucket {
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
    }
    v
}

/// The inverse of [`encode_bucket`].
pub fn decode_bucket(mut b: &[u8]) -> Result<Bucket, StateError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 12 {
            return Err(StateError::Corrupt("truncated local bucket".into()));
        }
        let id = u64_at(b, 0);
        let len = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")) as usize;
        let data = b
            .get(12..12 + len)
            .ok_or_else(|| StateError::Corrupt("truncated local bucket".into()))?;
        out.push((id, Bytes::copy_from_slice(data)));
        b = &b[12 + len..];
    }
    Ok(out)
}

/// A journal entry as the node version (24 bytes) followed by the plaintext.
pub fn encode_pending(nv: &NodeVersion, plain: &[u8]) -> Vec<u8> {
    let mut v = encode_node(nv);
    v.extend_from_slice(plain);
    v
}

/// The inverse of [`encode_pending`].
pub fn decode_pending(b: &[u8]) -> Result<(NodeVersion, Bytes), StateError> {
    if b.len() < 24 {
        return Err(StateError::Corrupt("truncated journal entry".into()));
    }
    Ok((decode_node(&b[..24])?, Bytes::copy_from_slice(&b[24..])))
}

/// A big-endian u64 key.
pub(crate) fn decode_u64(b: &[u8]) -> Result<u64, StateError> {
    b.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| StateError::Corrupt(format!("{} bytes where 8 were expected", b.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let nv = NodeVersion {
            version: 7,
            slot: 2,
            epoch: 1 << 40,
            generation: u64::MAX - 3,
            base: 1,
        };
        assert_eq!(decode_node(&encode_node(&nv)).unwrap(), nv);
        assert!(decode_node(&[0; 16]).is_err());
        let b: Bucket = vec![(3, Bytes::from_static(b"abc")), (u64::MAX, Bytes::new())];
        assert_eq!(decode_bucket(&encode_bucket(&b)).unwrap(), b);
        assert!(decode_bucket(&encode_bucket(&b)[..5]).is_err());
        let (n2, p) = decode_pending(&encode_pending(&nv, b"plain")).unwrap();
        assert_eq!((n2, p.as_ref()), (nv, &b"plain"[..]));
    }
}
