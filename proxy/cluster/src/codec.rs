//! Serde helpers for the gateway's JSON: etcd's `int64` fields travel as strings
//! (and are omitted when zero), `bytes` fields as standard base64.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serializer};

/// An `int64` field: written as a decimal string, read from a string or a number.
pub(crate) mod int64 {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            S(String),
            N(i64),
        }
        match Either::deserialize(d)? {
            Either::S(s) => s.parse().map_err(serde::de::Error::custom),
            Either::N(n) => Ok(n),
        }
    }
}

/// A `bytes` field: standard base64 with padding.
pub(crate) mod b64 {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        STANDARD.decode(s).map_err(serde::de::Error::custom)
    }
}

/// For `skip_serializing_if`: etcd reads an absent `int64` as zero.
pub(crate) fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// For `skip_serializing_if`: etcd reads an absent `bytes` field as empty.
pub(crate) fn is_empty(v: &[u8]) -> bool {
    v.is_empty()
}
