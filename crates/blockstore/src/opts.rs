//! The option structs of the [`BlockStore`](crate::BlockStore) core: what used
//! to be a separate, defaulted method per variant (`get_many_bounded`,
//! `put_many_redoable`, `list_bounded`) is a field here, so a wrapper forwards
//! the whole struct and every option reaches the back-end.

use bytes::Bytes;

use crate::{check_bounded, ObjKey, Result, SizeBound, StoreError};

/// Options of a batched read, [`BlockStore::get_opts`](crate::BlockStore::get_opts).
///
/// `GetOpts::default()` is a plain read (what
/// [`BlockStoreExt::get_many`](crate::BlockStoreExt::get_many) sends).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetOpts {
    /// The size every present object must have. An answer of another size is
    /// [`StoreError::WrongSize`], and a back-end that streams its answers (S3,
    /// fs) stops reading at the bound, so a hostile provider cannot make the
    /// proxy buffer more than the caller expects.
    ///
    /// `None`: the caller names no bound, and the back-end applies its own cap if
    /// it has one (S3: `max_object_bytes`; fs and memory: none).
    pub bound: Option<SizeBound>,
}

impl GetOpts {
    /// A read with every present object within `bound`.
    pub fn bounded(bound: SizeBound) -> Self {
        Self { bound: Some(bound) }
    }

    /// `Ok` if every present object of an answer to `keys` is within the bound
    /// (always, without one); else [`StoreError::WrongSize`] naming the first
    /// object outside it. For back-ends that hold their objects in memory
    /// already, so that checking after the read costs nothing.
    pub fn check(&self, keys: &[ObjKey], got: &[Option<Bytes>]) -> Result<()> {
        match self.bound {
            Some(bound) => check_bounded(keys, got, bound),
            None => Ok(()),
        }
    }
}

/// How a batched write may replace its objects, [`PutOpts::mode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PutMode {
    /// Each object is replaced atomically: a concurrent or later read sees the
    /// whole old object or the whole new one, never a part.
    #[default]
    Atomic,
    /// For objects that the caller can write again after a crash (it keeps what
    /// it needs to redo them, and nothing reads them before it has) and that
    /// nothing reads while the call runs. A back-end may therefore write an
    /// object in place instead of replacing it atomically: while the call runs,
    /// or after a crash or failure during it, such an object may be torn (part
    /// old, part new) or partial until the caller writes it again. When the
    /// call returns `Ok`, every item is whole and durable as after an atomic
    /// write. Back-ends without a cheaper write treat it as [`PutMode::Atomic`]
    /// (S3, memory); the fs back-end writes in place (a `pwrite` and an
    /// `fdatasync` on the existing or new file instead of a temporary file, an
    /// fsync and a rename).
    Redoable,
}

/// Options of a batched write, [`BlockStore::put_opts`](crate::BlockStore::put_opts).
///
/// `PutOpts::default()` is an atomic write (what
/// [`BlockStoreExt::put_many`](crate::BlockStoreExt::put_many) sends).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PutOpts {
    /// Whether each object is replaced atomically or may be written in place.
    pub mode: PutMode,
}

impl PutOpts {
    /// A write of objects the caller can redo ([`PutMode::Redoable`]).
    pub fn redoable() -> Self {
        Self {
            mode: PutMode::Redoable,
        }
    }
}

/// Options of a listing, [`BlockStore::list_opts`](crate::BlockStore::list_opts).
///
/// `ListOpts::default()` is a plain listing (what
/// [`BlockStoreExt::list`](crate::BlockStoreExt::list) sends).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListOpts {
    /// The most keys the caller accepts: a listing of more is
    /// [`StoreError::WrongSize`], and a back-end that pages or walks (S3, fs)
    /// stops collecting beyond the bound.
    ///
    /// `None`: the caller names no bound, and the back-end applies its own cap if
    /// it has one (S3: `max_list_keys`; fs and memory: none).
    pub max_keys: Option<usize>,
}

impl ListOpts {
    /// A listing of at most `max_keys` keys.
    pub fn at_most(max_keys: usize) -> Self {
        Self {
            max_keys: Some(max_keys),
        }
    }

    /// `Ok` if a listing of `prefix` that found `keys` is within the bound
    /// (always, without one); else [`StoreError::WrongSize`]. For back-ends that
    /// collect a listing at no cost (memory).
    pub fn check(&self, prefix: &str, keys: &[ObjKey]) -> Result<()> {
        match self.max_keys {
            Some(max_keys) if keys.len() > max_keys => Err(StoreError::WrongSize {
                key: prefix.to_string(),
                got: format!("{} keys", keys.len()),
                expected: format!("at most {max_keys} keys"),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_plain_calls() {
        assert_eq!(GetOpts::default().bound, None);
        assert_eq!(PutOpts::default().mode, PutMode::Atomic);
        assert_eq!(ListOpts::default().max_keys, None);
        let k = ObjKey::new("a/b").unwrap();
        let keys = vec![k.clone(), k];
        let got = vec![Some(Bytes::from_static(b"abc")), None];
        assert!(GetOpts::default().check(&keys, &got).is_ok());
        assert!(GetOpts::bounded(SizeBound::Exact(3))
            .check(&keys, &got)
            .is_ok());
        assert!(GetOpts::bounded(SizeBound::Exact(2))
            .check(&keys, &got)
            .is_err());
        assert!(ListOpts::default().check("a/", &keys).is_ok());
        assert!(ListOpts::at_most(2).check("a/", &keys).is_ok());
        let e = ListOpts::at_most(1).check("a/", &keys).unwrap_err();
        assert!(
            e.to_string().contains("2 keys") && e.to_string().contains("at most 1 keys"),
            "{e}"
        );
    }
}
