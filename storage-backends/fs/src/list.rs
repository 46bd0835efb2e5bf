//! Listings: a walk of the tree below the deepest directory a prefix names,
//! skipping links and anything that is not a key, bounded by the caller.

use std::fs;
use std::io;
use std::path::Path;

use oram_blockstore::{ObjKey, Result, StoreError};

use crate::{io_err, FsStore};

impl FsStore {
    /// The keys starting with `prefix`, sorted; [`StoreError::WrongSize`] once
    /// more than `max_keys` are found.
    pub(crate) async fn list_keys(&self, prefix: &str, max_keys: usize) -> Result<Vec<ObjKey>> {
        // Start the walk at the deepest directory the prefix names in full.
        let base = prefix.rfind('/').map(|i| &prefix[..i]).unwrap_or("");
        let base = if base.is_empty() || ObjKey::new(base).is_err() {
            String::new()
        } else {
            base.to_string()
        };
        let prefix = prefix.to_string();
        self.blocking(move |inner| {
            let mut out = Vec::new();
            let mut start = inner.root.clone();
            for seg in base.split('/').filter(|s| !s.is_empty()) {
                start.push(seg);
                // Links are not followed: a linked directory lists as nothing.
                match fs::symlink_metadata(&start) {
                    Ok(m) if m.is_dir() => {}
                    _ => return Ok(Vec::new()),
                }
            }
            walk(&start, &base, &prefix, max_keys, &mut out)?;
            let mut keys: Vec<ObjKey> = out
                .into_iter()
                .filter(|k| k.starts_with(&prefix))
                .filter_map(|k| ObjKey::new(k).ok())
                .collect();
            keys.sort();
            Ok(keys)
        })
        .await
    }
}

/// Collects the keys of all files under `dir` (whose key prefix is `rel`) that
/// start with `prefix`, failing beyond `max` of them. Links are skipped.
fn walk(dir: &Path, rel: &str, prefix: &str, max: usize, out: &mut Vec<String>) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("list", dir.display())(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err("list", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue; // the temporary directory and anything else that is not a key
        }
        let key = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let ft = entry.file_type().map_err(io_err("list", dir.display()))?;
        if ft.is_dir() {
            walk(&entry.path(), &key, prefix, max, out)?;
        } else if ft.is_file() && key.starts_with(prefix) {
            out.push(key);
            if out.len() > max {
                return Err(StoreError::WrongSize {
                    key: prefix.to_string(),
                    got: format!("more than {max} keys"),
                    expected: format!("at most {max} keys"),
                });
            }
        }
    }
    Ok(())
}
