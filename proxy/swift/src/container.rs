//! Container requests: create, metadata, delete, listing.

use std::fmt::Write as _;

use http::header;
use http::{Method, StatusCode};

use crate::acl::{self, acl_updates};
use crate::error::{err, err_msg, obj_err, Res, SwiftError};
use crate::listing::*;
use crate::meta::{check_merged, meta_updates};
use crate::plumbing::{Answer, Ctx};
use crate::slo;
use crate::util::*;
use crate::{Caller, SwiftApi};

impl SwiftApi {
    /// A container request; `caller` owns `owner` unless this is a listing the
    /// container's read ACL allowed.
    pub(crate) async fn container(
        &self,
        ctx: &Ctx,
        caller: &Caller,
        owner: &str,
        c: &str,
    ) -> Res<Answer> {
        let layer = &self.inner.layer;
        match ctx.method {
            Method::PUT => {
                // One storage policy: the ORAM.
                if let Some(p) = ctx.header_utf8("x-storage-policy")? {
                    if !p.trim().is_empty() && !p.trim().eq_ignore_ascii_case("oram") {
                        return Err(err_msg(400, format!("Invalid X-Storage-Policy {p:?}")));
                    }
                }
                let meta =
                    meta_updates(ctx, "x-container-meta-", Some("x-remove-container-meta-"))?;
                let acls = acl_updates(ctx)?;
                let created = layer
                    .create_container(owner, c, meta, acls)
                    .await
                    .map_err(obj_err)?;
                Ok(Answer::new(if created { 201 } else { 202 }))
            }
            Method::POST => {
                let meta =
                    meta_updates(ctx, "x-container-meta-", Some("x-remove-container-meta-"))?;
                let acls = acl_updates(ctx)?;
                check_merged(layer.head_bucket(owner, c).map_err(obj_err)?.meta, &meta)?;
                layer
                    .update_bucket_meta(owner, c, meta, acls)
                    .await
                    .map_err(obj_err)?;
                Ok(Answer::new(204))
            }
            Method::DELETE => {
                layer.delete_bucket(owner, c).await.map_err(obj_err)?;
                Ok(Answer::new(204))
            }
            Method::GET | Method::HEAD => self.container_get(ctx, caller.owns(owner), owner, c),
            _ => Err(SwiftError {
                headers: vec![(header::ALLOW, "GET, HEAD, PUT, POST, DELETE".into())],
                ..err(405)
            }),
        }
    }

    /// A container's listing (GET) or headers (HEAD); its ACLs only for its
    /// owner (`show_acls`).
    pub(crate) fn container_get(
        &self,
        ctx: &Ctx,
        show_acls: bool,
        owner: &str,
        c: &str,
    ) -> Res<Answer> {
        let layer = &self.inner.layer;
        let b = layer.head_bucket(owner, c).map_err(obj_err)?;
        let (count, bytes) = layer.bucket_usage(owner, c).map_err(obj_err)?;
        let mut a = Answer::new(204)
            .header("x-container-object-count", count.to_string())
            .header("x-container-bytes-used", bytes.to_string())
            .header("x-timestamp", x_timestamp(b.created_ms))
            .header("x-put-timestamp", x_timestamp(b.created_ms))
            .header("x-storage-policy", "oram")
            .header(
                "last-modified",
                http_date_secs(modified_secs(b.created_ms.max(b.meta_modified_ms))),
            );
        for (k, v) in &b.meta {
            a = a.header(&format!("x-container-meta-{k}"), v);
        }
        if show_acls {
            for key in [acl::READ, acl::WRITE] {
                if let Some(v) = b.sysmeta.get(key) {
                    a = a.header(&format!("x-container-{key}"), v);
                }
            }
        }
        let q = list_query(ctx)?;
        let fmt = listing_format(ctx);
        let entries = if ctx.method == Method::HEAD {
            Vec::new()
        } else {
            self.list_container(owner, c, &q)?
        };
        let text = match fmt {
            Format::Plain => plain_listing(&entries),
            Format::Json => {
                let v: Vec<serde_json::Value> = entries
                    .iter()
                    .map(|e| match e {
                        Entry::Item(n, r) => {
                            let mut v = serde_json::json!({
                                "name": n,
                                "hash": r.etag,
                                "bytes": r.size,
                                "content_type": r.meta.content_type.as_deref().unwrap_or("application/octet-stream"),
                                "last_modified": iso_date(r.modified_ms),
                            });
                            // A static large object lists its joined size and ETag.
                            if let Some((size, etag)) = slo::slo_size_etag(r) {
                                v["bytes"] = size.into();
                                v["slo_etag"] = format!("\"{etag}\"").into();
                            }
                            v
                        }
                        Entry::Subdir(s) => serde_json::json!({"subdir": s}),
                    })
                    .collect();
                serde_json::Value::Array(v).to_string()
            }
            Format::Xml => {
                let mut s = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<container name=\"{}\">",
                    xml_escape(c)
                );
                for e in &entries {
                    match e {
                        Entry::Item(n, r) => {
                            let _ = write!(
                                s,
                                "<object><name>{}</name><hash>{}</hash><bytes>{}</bytes><content_type>{}</content_type><last_modified>{}</last_modified></object>",
                                xml_escape(n),
                                r.etag,
                                slo::slo_size_etag(r).map_or(r.size, |x| x.0),
                                xml_escape(r.meta.content_type.as_deref().unwrap_or("application/octet-stream")),
                                iso_date(r.modified_ms)
                            );
                        }
                        Entry::Subdir(d) => {
                            let d = xml_escape(d);
                            let _ = write!(s, "<subdir name=\"{d}\"><name>{d}</name></subdir>");
                        }
                    }
                }
                s.push_str("</container>");
                s
            }
        };
        if ctx.method == Method::HEAD || (entries.is_empty() && fmt == Format::Plain) {
            return Ok(a.header("content-type", content_type_of(fmt)));
        }
        a.status = StatusCode::OK;
        Ok(a.text(content_type_of(fmt), text))
    }
}
