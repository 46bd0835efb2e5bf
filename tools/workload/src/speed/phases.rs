//! The client phases of one configuration: small-object latency, then single-
//! and multi-stream throughput of large objects (every byte read checked).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use bytes::Bytes;

use super::args::Plan;
use super::report::{Flow, Row};
use crate::api::{self, Endpoint};
use crate::harness;
use crate::report::fmt::bytes_h;

/// What one configuration is driven through.
pub struct Target {
    /// The client.
    pub client: Client,
    /// The bucket of the phases.
    pub bucket: String,
    /// The serving process (MinIO or the proxy).
    pub pid: u32,
}

/// An S3 error with `what` and every source in its chain, in one line.
pub fn s3_err<E: std::error::Error + 'static>(
    what: &str,
    e: aws_sdk_s3::error::SdkError<E>,
) -> String {
    use std::error::Error;
    let mut s = format!("{what}: {e}");
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

/// Small-object latency: `warmup` untimed GETs and PUTs, then `n` timed PUTs,
/// then `n` timed GETs (checked), one at a time. Returns (GET ms, PUT ms), sorted.
async fn latency(t: &Target, plan: &Plan, small: &Bytes) -> Result<(Vec<f64>, Vec<f64>), String> {
    const KEYS: usize = 8;
    for k in 0..KEYS {
        put_small(t, &format!("lat/get-{k}"), small).await?;
    }
    for i in 0..plan.warmup {
        put_small(t, &format!("lat/put-{}", i % KEYS), small).await?;
        get_small(t, &format!("lat/get-{}", i % KEYS), small).await?;
    }
    let mut put_ms = Vec::with_capacity(plan.requests);
    for i in 0..plan.requests {
        let t0 = Instant::now();
        put_small(t, &format!("lat/put-{}", i % KEYS), small).await?;
        put_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let mut get_ms = Vec::with_capacity(plan.requests);
    for i in 0..plan.requests {
        let t0 = Instant::now();
        get_small(t, &format!("lat/get-{}", i % KEYS), small).await?;
        get_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    put_ms.sort_by(f64::total_cmp);
    get_ms.sort_by(f64::total_cmp);
    Ok((get_ms, put_ms))
}

async fn put_small(t: &Target, key: &str, body: &Bytes) -> Result<(), String> {
    t.client
        .put_object()
        .bucket(&t.bucket)
        .key(key)
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .map_err(|e| s3_err(&format!("PUT {key}"), e))?;
    Ok(())
}

async fn get_small(t: &Target, key: &str, want: &Bytes) -> Result<(), String> {
    let got = t
        .client
        .get_object()
        .bucket(&t.bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| s3_err(&format!("GET {key}"), e))?
        .body
        .collect()
        .await
        .map_err(|e| format!("GET {key} body: {e}"))?
        .into_bytes();
    if got != *want {
        return Err(format!(
            "GET {key}: {} bytes, not what was written",
            got.len()
        ));
    }
    Ok(())
}

/// PUTs `data` as each of `keys` concurrently (one stream per key); a multipart
/// upload stops starting parts after `deadline` and completes with the parts
/// done. Returns the flow and the length stored per key.
async fn put_objects(
    t: &Target,
    keys: &[String],
    data: &Bytes,
    plan: &Plan,
    deadline: Option<Instant>,
    progress: &Arc<AtomicU64>,
) -> Result<(Flow, Vec<u64>), String> {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, key) in keys.iter().enumerate() {
        let (c, bucket, key, data, progress) = (
            t.client.clone(),
            t.bucket.clone(),
            key.clone(),
            data.clone(),
            progress.clone(),
        );
        let (multipart, part) = (plan.multipart(), plan.part_size);
        set.spawn(async move {
            if !multipart {
                let len = data.len() as u64;
                c.put_object()
                    .bucket(&bucket)
                    .key(&key)
                    .body(ByteStream::from(data))
                    .send()
                    .await
                    .map_err(|e| s3_err(&format!("PUT {key}"), e))?;
                progress.fetch_add(len, Ordering::Relaxed);
                return Ok::<_, String>((i, len, false));
            }
            let up = c
                .create_multipart_upload()
                .bucket(&bucket)
                .key(&key)
                .send()
                .await
                .map_err(|e| s3_err(&format!("create upload {key}"), e))?;
            let id = up.upload_id().unwrap_or_default().to_string();
            let mut parts = Vec::new();
            let mut off = 0u64;
            let mut cut = false;
            while off < data.len() as u64 {
                if off > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                    cut = true;
                    break;
                }
                let end = (off + part).min(data.len() as u64);
                let num = parts.len() as i32 + 1;
                let r = c
                    .upload_part()
                    .bucket(&bucket)
                    .key(&key)
                    .upload_id(&id)
                    .part_number(num)
                    .body(ByteStream::from(data.slice(off as usize..end as usize)))
                    .send()
                    .await
                    .map_err(|e| s3_err(&format!("upload part {num} of {key}"), e))?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(num)
                        .set_e_tag(r.e_tag().map(str::to_string))
                        .build(),
                );
                progress.fetch_add(end - off, Ordering::Relaxed);
                off = end;
            }
            c.complete_multipart_upload()
                .bucket(&bucket)
                .key(&key)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| s3_err(&format!("complete upload {key}"), e))?;
            Ok((i, off, cut))
        });
    }
    let mut lens = vec![0; keys.len()];
    let mut flow = Flow::default();
    while let Some(r) = set.join_next().await {
        let (i, len, cut) = r.map_err(|e| e.to_string())??;
        lens[i] = len;
        flow.bytes += len;
        flow.cut |= cut;
    }
    flow.secs = start.elapsed().as_secs_f64();
    Ok((flow, lens))
}

/// GETs each of `objects` (key, stored length) concurrently, streaming and
/// checking the body against `data`; a stream stops reading after `deadline`.
async fn get_objects(
    t: &Target,
    objects: &[(String, u64)],
    data: &Bytes,
    deadline: Option<Instant>,
    progress: &Arc<AtomicU64>,
) -> Result<Flow, String> {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (key, len) in objects {
        let (c, bucket, key, len, data, progress) = (
            t.client.clone(),
            t.bucket.clone(),
            key.clone(),
            *len,
            data.clone(),
            progress.clone(),
        );
        set.spawn(async move {
            let mut body = c
                .get_object()
                .bucket(&bucket)
                .key(&key)
                .send()
                .await
                .map_err(|e| s3_err(&format!("GET {key}"), e))?
                .body;
            let mut off = 0usize;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| format!("GET {key} body: {e}"))?;
                let end = off + chunk.len();
                if end as u64 > len || chunk[..] != data[off..end] {
                    return Err(format!(
                        "GET {key}: bytes {off}..{end} differ from what was written"
                    ));
                }
                progress.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                off = end;
                if (off as u64) < len && deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok::<_, String>((off as u64, true));
                }
            }
            if off as u64 != len {
                return Err(format!("GET {key}: {off} bytes, {len} were written"));
            }
            Ok((off as u64, false))
        });
    }
    let mut flow = Flow::default();
    while let Some(r) = set.join_next().await {
        let (n, cut) = r.map_err(|e| e.to_string())??;
        flow.bytes += n;
        flow.cut |= cut;
    }
    flow.secs = start.elapsed().as_secs_f64();
    Ok(flow)
}

/// The latency and throughput phases of one configuration. `settle` runs after
/// each PUT phase (a proxy's write-backs drain before its CPU is read).
pub async fn phases(
    t: &Target,
    plan: &Plan,
    data: &Bytes,
    small: &Bytes,
    bar: &indicatif::ProgressBar,
    settle: &dyn Fn(),
) -> Result<Row, String> {
    let name = bar.message();
    let progress = Arc::new(AtomicU64::new(0));
    let ticker = {
        let (bar, progress) = (bar.clone(), progress.clone());
        let name = name.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let b = progress.load(Ordering::Relaxed);
                bar.set_message(format!("{name}: {}", bytes_h(b)));
            }
        })
    };
    let result = async {
        bar.set_message(format!("{name}: latency"));
        let (get_ms, put_ms) = latency(t, plan, small).await?;
        bar.inc(1);
        let deadline = || plan.max_phase.map(|d| Instant::now() + d);
        let mut cpu = 0.0;
        let measure = |r: &mut f64, c0: f64| *r += harness::cpu_seconds_of(t.pid) - c0;

        let one = vec!["big/single".to_string()];
        let c0 = harness::cpu_seconds_of(t.pid);
        let (put1, lens1) = put_objects(t, &one, data, plan, deadline(), &progress).await?;
        tokio::task::block_in_place(settle);
        measure(&mut cpu, c0);
        bar.inc(1);
        let objs1: Vec<(String, u64)> = one.iter().cloned().zip(lens1).collect();
        let c0 = harness::cpu_seconds_of(t.pid);
        let get1 = get_objects(t, &objs1, data, deadline(), &progress).await?;
        measure(&mut cpu, c0);
        bar.inc(1);
        t.client
            .delete_object()
            .bucket(&t.bucket)
            .key(&one[0])
            .send()
            .await
            .map_err(|e| s3_err("DELETE big/single", e))?;

        let many: Vec<String> = (0..plan.streams)
            .map(|i| format!("big/multi-{i}"))
            .collect();
        let c0 = harness::cpu_seconds_of(t.pid);
        let (putn, lensn) = put_objects(t, &many, data, plan, deadline(), &progress).await?;
        tokio::task::block_in_place(settle);
        measure(&mut cpu, c0);
        bar.inc(1);
        let objsn: Vec<(String, u64)> = many.iter().cloned().zip(lensn).collect();
        let c0 = harness::cpu_seconds_of(t.pid);
        let getn = get_objects(t, &objsn, data, deadline(), &progress).await?;
        measure(&mut cpu, c0);
        bar.inc(1);
        for k in &many {
            t.client
                .delete_object()
                .bucket(&t.bucket)
                .key(k)
                .send()
                .await
                .map_err(|e| s3_err(&format!("DELETE {k}"), e))?;
        }
        Ok(Row {
            name: name.clone(),
            get_ms,
            put_ms,
            put1,
            putn,
            get1,
            getn,
            cpu_s: cpu,
            peak_rss: harness::peak_rss_of(t.pid),
            proxy: None,
        })
    }
    .await;
    ticker.abort();
    result
}

/// The size of a bucket (block) object on an fs store: the first file in a
/// `n`, `r` or `b` directory under `store`, or in one of its key shards'
/// directories (`n/<shard>/`).
pub fn object_len_in_fs(store: &Path) -> Option<u64> {
    let first_file = |dir: &Path| -> Option<u64> {
        let rd = std::fs::read_dir(dir).ok()?;
        let f = rd.flatten().find(|f| f.path().is_file())?;
        f.metadata().ok().map(|m| m.len())
    };
    let vols = std::fs::read_dir(store).ok()?;
    for v in vols.flatten() {
        for d in ["n", "r", "b"] {
            let dir = v.path().join(d);
            if let Some(len) = first_file(&dir) {
                return Some(len);
            }
            let Ok(shards) = std::fs::read_dir(&dir) else {
                continue;
            };
            for s in shards.flatten().filter(|s| s.path().is_dir()) {
                if let Some(len) = first_file(&s.path()) {
                    return Some(len);
                }
            }
        }
    }
    None
}

/// The size of a bucket (block) object in a MinIO bucket (first page).
pub async fn object_len_in_s3(ep: &Endpoint, bucket: &str) -> Option<u64> {
    let out = api::s3_client(ep)
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .ok()?;
    out.contents()
        .iter()
        .find(|o| {
            o.key()
                .is_some_and(|k| ["/n/", "/r/", "/b/"].iter().any(|d| k.contains(d)))
        })
        .and_then(|o| o.size())
        .map(|s| s as u64)
}
