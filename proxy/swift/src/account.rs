//! Account requests: listing (GET/HEAD), metadata (POST), bulk delete.
//!
//! GET and HEAD also carry the volume's fullness, from the object layer's usage
//! figures: [`QUOTA_HEADER`] (as Swift's account-quota middleware sets it; here
//! the volume's capacity, shared by every account, not set by clients),
//! [`CAPACITY_HEADER`] and [`FREE_HEADER`], in bytes of object data.

use std::fmt::Write as _;

use bytes::Bytes;
use futures::StreamExt;
use http::header;
use http::{Method, StatusCode};
use oram_objects::ObjectError;

use crate::acl::check_account_acl;
use crate::error::{err, err_msg, obj_err, Res, SwiftError};
use crate::limits::*;
use crate::listing::*;
use crate::meta::{check_merged, meta_updates};
use crate::plumbing::{body_stream, Answer, Ctx};
use crate::util::*;
use crate::SwiftApi;

/// The quota header of Swift's account-quota middleware: the volume's capacity.
pub(crate) const QUOTA_HEADER: &str = "x-account-meta-quota-bytes";
/// The volume's capacity in bytes of object data.
pub(crate) const CAPACITY_HEADER: &str = "x-account-oram-volume-bytes-capacity";
/// The volume's free space in bytes of object data (shared by every account).
pub(crate) const FREE_HEADER: &str = "x-account-oram-volume-bytes-free";
/// [`QUOTA_HEADER`]'s metadata name.
const QUOTA_NAME: &str = "quota-bytes";

impl SwiftApi {
    pub(crate) async fn account<B>(
        &self,
        ctx: &Ctx,
        account: &str,
        owner: &str,
        body: B,
    ) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let layer = &self.inner.layer;
        match ctx.method {
            Method::GET | Method::HEAD => {
                let buckets = layer.list_buckets(owner).map_err(obj_err)?;
                let mut items = Vec::with_capacity(buckets.len());
                let (mut objects, mut bytes) = (0u64, 0u64);
                for b in &buckets {
                    let (n, sz) = layer.bucket_usage(owner, &b.name).map_err(obj_err)?;
                    objects += n;
                    bytes += sz;
                    items.push((b.name.clone(), (n, sz, b.created_ms)));
                }
                let created = buckets.iter().map(|b| b.created_ms).min().unwrap_or(0);
                let mut a = Answer::new(204)
                    .header("x-account-container-count", buckets.len().to_string())
                    .header("x-account-object-count", objects.to_string())
                    .header("x-account-bytes-used", bytes.to_string())
                    .header("x-timestamp", x_timestamp(created))
                    .header("x-put-timestamp", x_timestamp(created))
                    .header(
                        "x-account-storage-policy-oram-container-count",
                        buckets.len().to_string(),
                    )
                    .header(
                        "x-account-storage-policy-oram-object-count",
                        objects.to_string(),
                    )
                    .header(
                        "x-account-storage-policy-oram-bytes-used",
                        bytes.to_string(),
                    );
                for (k, v) in layer.account_meta(owner).map_err(obj_err)? {
                    if k != QUOTA_NAME {
                        a = a.header(&format!("x-account-meta-{k}"), v);
                    }
                }
                let usage = layer.usage();
                a = a
                    .header(QUOTA_HEADER, usage.capacity_bytes().to_string())
                    .header(CAPACITY_HEADER, usage.capacity_bytes().to_string())
                    .header(FREE_HEADER, usage.free_bytes().to_string());
                let q = list_query(ctx)?;
                let fmt = listing_format(ctx);
                let entries = filter_names(items, &q);
                let text = match fmt {
                    Format::Plain => plain_listing(&entries),
                    Format::Json => {
                        let v: Vec<serde_json::Value> = entries
                            .iter()
                            .map(|e| match e {
                                Entry::Item(n, (c, b, t)) => serde_json::json!({
                                    "name": n, "count": c, "bytes": b,
                                    "last_modified": iso_date(*t),
                                }),
                                Entry::Subdir(s) => serde_json::json!({"subdir": s}),
                            })
                            .collect();
                        serde_json::Value::Array(v).to_string()
                    }
                    Format::Xml => {
                        let mut s = format!(
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<account name=\"{}\">",
                            xml_escape(account)
                        );
                        for e in &entries {
                            match e {
                                Entry::Item(n, (c, b, t)) => {
                                    let _ = write!(
                                        s,
                                        "<container><name>{}</name><count>{c}</count><bytes>{b}</bytes><last_modified>{}</last_modified></container>",
                                        xml_escape(n),
                                        iso_date(*t)
                                    );
                                }
                                Entry::Subdir(d) => {
                                    let d = xml_escape(d);
                                    let _ =
                                        write!(s, "<subdir name=\"{d}\"><name>{d}</name></subdir>");
                                }
                            }
                        }
                        s.push_str("</account>");
                        s
                    }
                };
                if ctx.method == Method::HEAD || (entries.is_empty() && fmt == Format::Plain) {
                    return Ok(a.header("content-type", content_type_of(fmt)));
                }
                a.status = StatusCode::OK;
                Ok(a.text(content_type_of(fmt), text))
            }
            Method::POST if ctx.has_param("bulk-delete") => {
                self.bulk_delete(ctx, owner, body).await
            }
            Method::POST => {
                // Validated as tempauth does, then refused unless empty: account
                // ACLs are not implemented (`/info`: tempauth.account_acls = false).
                if let Some(v) = ctx.headers.get("x-account-access-control") {
                    if !check_account_acl(v.as_bytes())?.is_empty() {
                        return Err(err_msg(
                            400,
                            "X-Account-Access-Control: account ACLs are not supported by \
                             this cluster (tempauth.account_acls is false in /info); grant \
                             access per container with X-Container-Read / X-Container-Write",
                        ));
                    }
                }
                let meta = meta_updates(ctx, "x-account-meta-", Some("x-remove-account-meta-"))?;
                if meta.contains_key(QUOTA_NAME) {
                    // As the account-quota middleware answers a user who is not
                    // a reseller admin: the quota is the volume's capacity.
                    return Err(err_msg(
                        403,
                        "X-Account-Meta-Quota-Bytes is the volume's capacity, set by the proxy",
                    ));
                }
                check_merged(layer.account_meta(owner).map_err(obj_err)?, &meta)?;
                layer
                    .update_account_meta(owner, meta)
                    .await
                    .map_err(obj_err)?;
                Ok(Answer::new(204))
            }
            Method::DELETE if ctx.has_param("bulk-delete") => {
                self.bulk_delete(ctx, owner, body).await
            }
            _ => Err(SwiftError {
                headers: vec![(header::ALLOW, "GET, HEAD, POST".into())],
                ..err(405)
            }),
        }
    }

    pub(crate) async fn bulk_delete<B>(&self, ctx: &Ctx, owner: &str, body: B) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let limit = MAX_DELETES_PER_REQUEST * (MAX_OBJECT_NAME_LENGTH * 3 + 260);
        let mut s = body_stream(body);
        let mut text = Vec::new();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(|_| err(499))?;
            if text.len() + chunk.len() > limit {
                return Err(err(413));
            }
            text.extend_from_slice(&chunk);
        }
        let text = String::from_utf8(text).map_err(|_| err_msg(400, "Invalid UTF8"))?;
        let names: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if names.len() > MAX_DELETES_PER_REQUEST {
            return Err(err_msg(
                413,
                format!("Maximum Bulk Deletes: {MAX_DELETES_PER_REQUEST} per request"),
            ));
        }
        let layer = &self.inner.layer;
        let (mut deleted, mut not_found) = (0u64, 0u64);
        let mut errors: Vec<(String, String)> = Vec::new();
        for raw in names {
            let Ok(name) = String::from_utf8(percent_decode(raw, false)) else {
                errors.push((raw.to_string(), "412 Precondition Failed".into()));
                continue;
            };
            let trimmed = name.trim_start_matches('/');
            let (c, o) = match trimmed.split_once('/') {
                Some((c, o)) if !o.is_empty() => (c, Some(o)),
                Some((c, _)) => (c, None),
                None => (trimmed, None),
            };
            let r = match o {
                Some(o) => layer
                    .delete_object(owner, c, o, None)
                    .await
                    .map(|found| found as u8),
                None => layer.delete_bucket(owner, c).await.map(|()| 1),
            };
            match r {
                Ok(1) => deleted += 1,
                Ok(_) | Err(ObjectError::NoSuchBucket(_)) => not_found += 1,
                Err(e) => {
                    let e = obj_err(e);
                    errors.push((
                        name.clone(),
                        format!(
                            "{} {}",
                            e.status.as_u16(),
                            e.status.canonical_reason().unwrap_or("")
                        ),
                    ));
                }
            }
        }
        let status = if errors.is_empty() {
            "200 OK"
        } else {
            "400 Bad Request"
        };
        let (ct, text) = crate::slo::bulk_body(ctx, deleted, not_found, status, &errors);
        Ok(Answer::new(200).text(ct, text))
    }
}
