//! `DELETE ?multipart-manifest=delete`: a static large object with every
//! segment it (and each nested manifest) names, answered in bulk delete's form.
//!
//! Each manifest is read only when the caller may read its container, as in
//! Swift, where the middleware fetches it as the caller: one it may not read is
//! neither read nor deleted, and is listed among the errors by the name the
//! caller already knows (the request's, or the one in a manifest it read), so
//! no name from a manifest the caller cannot read is ever revealed. Each
//! deletion needs write access to its container. The targets are collected
//! first, within the request's budget ([`super::walk::Budget`]): beyond it the
//! request is refused (400) before anything is deleted.

use std::fmt::Write as _;

use oram_objects::ObjectError;

use super::walk::{Budget, SloLimit};
use super::{is_slo, status_line};
use crate::acl::Access;
use crate::error::{err_msg, obj_err, Res, SwiftError};
use crate::limits::*;
use crate::listing::{listing_format, Format};
use crate::plumbing::{Answer, Ctx};
use crate::util::*;
use crate::{Caller, SwiftApi};

/// Swift's answer to a delete beyond the budget: 400, plain text.
fn too_many(e: SloLimit) -> SwiftError {
    match e {
        SloLimit::Segments => err_msg(400, "Too many buffered slo segments to delete."),
        e => err_msg(400, e.to_string()),
    }
}

impl SwiftApi {
    /// `DELETE ?multipart-manifest=delete` of `c/o` (the caller may write `c`):
    /// the manifest and its segments, nested manifests' included (at most
    /// [`MAX_MANIFEST_NESTING`] deep); a plain object is deleted alone.
    pub(crate) async fn slo_delete(
        &self,
        ctx: &Ctx,
        caller: &Caller,
        owner: &str,
        (c, o): (&str, &str),
    ) -> Res<Answer> {
        let layer = &self.inner.layer;
        let budget = Budget::default();
        let mut errors: Vec<(String, String)> = Vec::new();
        // Segments first, then the manifests, the top one last.
        let mut segments: Vec<(String, String)> = Vec::new();
        let mut manifests: Vec<(String, String)> = Vec::new();
        let mut pending = vec![(c.to_string(), o.to_string(), 1usize)];
        while let Some((pc, po, depth)) = pending.pop() {
            let name = percent_encode_path(&format!("/{pc}/{po}"));
            if let Err(e) = self.authorize(caller, owner, &pc, Access::Read) {
                errors.push((name, status_line(e.status.as_u16())));
                continue;
            }
            let rec = match layer.head_object(owner, &pc, &po) {
                Ok(r) => r,
                // The request's own object must exist; a nested one that went
                // is a target like any other (found or not).
                Err(e) if depth == 1 => return Err(obj_err(e)),
                Err(_) => {
                    segments.push((pc, po));
                    continue;
                }
            };
            if !is_slo(&rec) {
                segments.push((pc, po));
                continue;
            }
            budget.manifest(rec.size).map_err(too_many)?;
            let entries = self.read_manifest(owner, &pc, &po, &rec).await?;
            for s in entries {
                budget.segment().map_err(too_many)?;
                let Some((sc, so)) = split_object_path(&s.name) else {
                    continue;
                };
                if s.sub_slo && depth < MAX_MANIFEST_NESTING {
                    pending.push((sc, so, depth + 1));
                } else {
                    segments.push((sc, so));
                }
            }
            manifests.push((pc, po));
        }
        let (mut deleted, mut not_found) = (0u64, 0u64);
        for (sc, so) in segments.into_iter().chain(manifests.into_iter().rev()) {
            let name = percent_encode_path(&format!("/{sc}/{so}"));
            if let Err(e) = self.authorize(caller, owner, &sc, Access::Write) {
                errors.push((name, status_line(e.status.as_u16())));
                continue;
            }
            match layer.delete_object(owner, &sc, &so, None).await {
                Ok(true) => deleted += 1,
                Ok(false) | Err(ObjectError::NoSuchBucket(_)) => not_found += 1,
                Err(e) => errors.push((name, status_line(obj_err(e).status.as_u16()))),
            }
        }
        let status = if errors.is_empty() {
            "200 OK"
        } else {
            "400 Bad Request"
        };
        let (ct, text) = bulk_body(ctx, deleted, not_found, status, &errors);
        Ok(Answer::new(200).text(ct, text))
    }
}

/// A bulk-delete style answer body.
pub(crate) fn bulk_body(
    ctx: &Ctx,
    deleted: u64,
    not_found: u64,
    status: &str,
    errors: &[(String, String)],
) -> (&'static str, String) {
    match listing_format(ctx) {
        Format::Json => (
            "application/json",
            serde_json::json!({
                "Number Deleted": deleted,
                "Number Not Found": not_found,
                "Response Body": "",
                "Response Status": status,
                "Errors": errors.iter().map(|(n, s)| [n, s]).collect::<Vec<_>>(),
            })
            .to_string(),
        ),
        Format::Xml => {
            let mut s = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<delete><number_deleted>{deleted}</number_deleted><number_not_found>{not_found}</number_not_found><response_body></response_body><response_status>{status}</response_status><errors>"
            );
            for (n, st) in errors {
                let _ = write!(
                    s,
                    "<object><name>{}</name><status>{st}</status></object>",
                    xml_escape(n)
                );
            }
            s.push_str("</errors></delete>");
            ("application/xml", s)
        }
        Format::Plain => {
            let mut s = format!(
                "Number Deleted: {deleted}\nNumber Not Found: {not_found}\nResponse Body: \nResponse Status: {status}\nErrors: \n"
            );
            for (n, st) in errors {
                let _ = writeln!(s, "{n}, {st}");
            }
            ("text/plain", s)
        }
    }
}
