//! Raw back-end throughput at one object size: the fs back-end's ways of
//! writing and reading a file, and MinIO's PUTs and GETs.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use rand::RngCore;

use crate::api::{self, Endpoint};

/// Files written per batch by the raw fs measurement before the directory is
/// fsynced (the fs back-end fsyncs a directory once per `put_many`).
pub const RAW_FS_BATCH: u64 = 64;

/// Raw throughput of a back-end at one object size, bytes/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Raw {
    /// Reading objects back.
    pub read: f64,
    /// Writing objects that exist (fs: in place, as the fs back-end rewrites a
    /// bucket; MinIO: a PUT): the rate the limit uses, since an engine's
    /// steady state rewrites objects that exist.
    pub write: f64,
    /// Creating objects (fs: temporary file, fsync, rename, directory fsync per
    /// batch, as the fs back-end writes a bucket the first time; MinIO: a PUT).
    pub create: f64,
}

/// Writes `total` bytes as files of `len` bytes under `dir` the way the fs
/// back-end does, with `threads` threads: first created (each into a temporary
/// file, written, fsynced, renamed into place; the directory fsynced once per
/// batch of [`RAW_FS_BATCH`]), then rewritten in place (opened, written at
/// offset 0, `fdatasync`, as the fs back-end rewrites a bucket that exists); then
/// reads them all back; deletes them. Blocking.
pub fn raw_fs(dir: &Path, len: u64, total: u64, threads: usize, seed: u64) -> Result<Raw, String> {
    use std::io::Write;
    let tmp = dir.join("tmp");
    let data_dir = dir.join("data");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::create_dir_all(&data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let n = total.div_ceil(len).max(1);
    let mut body = vec![0u8; len as usize];
    crate::dist::rng_for(seed, "raw-fs", len).fill_bytes(&mut body);
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    let start = Instant::now();
    let mut first = 0;
    while first < n {
        let end = (first + RAW_FS_BATCH).min(n);
        on_threads(first..end, threads, |i| {
            let t = tmp.join(format!("{i}.tmp"));
            let mut f = std::fs::File::create(&t).map_err(|e| io("create", &t, e))?;
            f.write_all(&body).map_err(|e| io("write", &t, e))?;
            f.sync_all().map_err(|e| io("fsync", &t, e))?;
            let d = data_dir.join(i.to_string());
            std::fs::rename(&t, &d).map_err(|e| io("rename", &d, e))
        })?;
        std::fs::File::open(&data_dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("fsync", &data_dir, e))?;
        first = end;
    }
    let create = (n * len) as f64 / start.elapsed().as_secs_f64();
    // The rewrite: other bytes, so that nothing can be skipped.
    for b in body.iter_mut() {
        *b = !*b;
    }
    let start = Instant::now();
    on_threads(0..n, threads, |i| {
        use std::os::unix::fs::FileExt;
        let p = data_dir.join(i.to_string());
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .map_err(|e| io("open", &p, e))?;
        f.write_all_at(&body, 0).map_err(|e| io("write", &p, e))?;
        f.sync_data().map_err(|e| io("fdatasync", &p, e))
    })?;
    let write = (n * len) as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    on_threads(0..n, threads, |i| {
        let p = data_dir.join(i.to_string());
        let got = std::fs::read(&p).map_err(|e| io("read", &p, e))?;
        if got != body {
            return Err(format!("{}: read back other bytes", p.display()));
        }
        Ok(())
    })?;
    let read = (n * len) as f64 / start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(dir);
    Ok(Raw {
        read,
        write,
        create,
    })
}

/// Runs `f` on every index of `range` with `threads` threads, each taking the
/// next index until none is left; the first error (or a panic) is returned.
fn on_threads(
    range: std::ops::Range<u64>,
    threads: usize,
    f: impl Fn(u64) -> Result<(), String> + Sync,
) -> Result<(), String> {
    let next = AtomicU64::new(range.start);
    let res: Vec<Result<(), String>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                sc.spawn(|| -> Result<(), String> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= range.end {
                            return Ok(());
                        }
                        f(i)?;
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("raw fs thread panicked".into()))
            })
            .collect()
    });
    res.into_iter().collect()
}

/// PUTs `total` bytes to MinIO as objects of `len` bytes with `conc` requests
/// in flight, then GETs them back (checked); deletes them and the bucket.
pub async fn raw_minio(
    ep: &Endpoint,
    len: u64,
    total: u64,
    conc: usize,
    seed: u64,
) -> Result<Raw, String> {
    let c = api::s3_client(ep);
    let bucket = format!("raw-{len}");
    c.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .map_err(|e| format!("create bucket {bucket}: {e}"))?;
    let n = total.div_ceil(len).max(1);
    let mut body = vec![0u8; len as usize];
    crate::dist::rng_for(seed, "raw-minio", len).fill_bytes(&mut body);
    let body = Bytes::from(body);
    let run = |write: bool| {
        let (c, bucket, body) = (c.clone(), bucket.clone(), body.clone());
        async move {
            let next = Arc::new(AtomicU64::new(0));
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..conc {
                let (c, bucket, body, next) =
                    (c.clone(), bucket.clone(), body.clone(), next.clone());
                set.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return Ok::<(), String>(());
                        }
                        let key = format!("o/{i}");
                        if write {
                            c.put_object()
                                .bucket(&bucket)
                                .key(&key)
                                .body(ByteStream::from(body.clone()))
                                .send()
                                .await
                                .map_err(|e| format!("raw PUT {key}: {e}"))?;
                        } else {
                            let got = c
                                .get_object()
                                .bucket(&bucket)
                                .key(&key)
                                .send()
                                .await
                                .map_err(|e| format!("raw GET {key}: {e}"))?
                                .body
                                .collect()
                                .await
                                .map_err(|e| format!("raw GET {key} body: {e}"))?
                                .into_bytes();
                            if got != body {
                                return Err(format!("raw GET {key}: other bytes"));
                            }
                        }
                    }
                });
            }
            let start = Instant::now();
            while let Some(r) = set.join_next().await {
                r.map_err(|e| e.to_string())??;
            }
            Ok::<f64, String>((n * len) as f64 / start.elapsed().as_secs_f64())
        }
    };
    let write = run(true).await?;
    let read = run(false).await?;
    crate::stored_bytes_then_delete(ep, &bucket).await?;
    Ok(Raw {
        read,
        write,
        create: write,
    })
}
