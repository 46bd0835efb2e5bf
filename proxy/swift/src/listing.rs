//! Listings of accounts and containers: formats, parameters, paging, and the
//! plain-text writer.

use oram_objects::{ListParams, ObjectRecord};

use crate::error::{err_msg, obj_err, Res};
use crate::limits::*;
use crate::plumbing::Ctx;
use crate::SwiftApi;

/// Listing formats.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Plain,
    Json,
    Xml,
}

pub(crate) fn listing_format(ctx: &Ctx) -> Format {
    match ctx.param("format").map(str::to_ascii_lowercase).as_deref() {
        Some("json") => return Format::Json,
        Some("xml") => return Format::Xml,
        Some("plain") => return Format::Plain,
        _ => {}
    }
    let accept = ctx.header("accept").unwrap_or("").to_ascii_lowercase();
    let pos = |t: &str| accept.find(t);
    match (
        pos("application/json"),
        pos("application/xml").or(pos("text/xml")),
        pos("text/plain"),
    ) {
        (Some(j), x, p) if x.is_none_or(|x| j < x) && p.is_none_or(|p| j < p) => Format::Json,
        (_, Some(x), p) if p.is_none_or(|p| x < p) => Format::Xml,
        _ => Format::Plain,
    }
}

pub(crate) fn content_type_of(f: Format) -> &'static str {
    match f {
        Format::Plain => "text/plain; charset=utf-8",
        Format::Json => "application/json; charset=utf-8",
        Format::Xml => "application/xml; charset=utf-8",
    }
}

/// Listing parameters shared by accounts and containers.
pub(crate) struct ListQuery {
    pub(crate) limit: usize,
    pub(crate) marker: Option<String>,
    pub(crate) end_marker: Option<String>,
    pub(crate) prefix: String,
    pub(crate) delimiter: Option<String>,
    pub(crate) reverse: bool,
    /// `path`: only entries directly under it, no subdirectories.
    pub(crate) path: bool,
}

pub(crate) fn list_query(ctx: &Ctx) -> Res<ListQuery> {
    let mut limit = LISTING_LIMIT;
    if let Some(l) = ctx.param("limit") {
        if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) {
            limit = l.parse().unwrap_or(usize::MAX);
            if limit > LISTING_LIMIT {
                return Err(err_msg(412, format!("Maximum limit is {LISTING_LIMIT}")));
            }
        }
    }
    let delimiter = ctx
        .param("delimiter")
        .filter(|d| !d.is_empty())
        .map(str::to_string);
    let non_empty = |n: &str| ctx.param(n).filter(|v| !v.is_empty()).map(str::to_string);
    let mut q = ListQuery {
        limit,
        marker: non_empty("marker"),
        end_marker: non_empty("end_marker"),
        prefix: ctx.param("prefix").unwrap_or("").to_string(),
        delimiter,
        reverse: ctx.param("reverse").is_some_and(|v| {
            matches!(
                v.to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on" | "t" | "y"
            )
        }),
        path: false,
    };
    if let Some(p) = ctx.param("path") {
        // Swift: a non-empty path lists the names directly under `path/`.
        q.prefix = if p.is_empty() {
            String::new()
        } else {
            format!("{}/", p.trim_end_matches('/'))
        };
        q.delimiter = None;
        q.path = true;
    }
    Ok(q)
}

/// One listing entry.
pub(crate) enum Entry<T> {
    Item(String, T),
    Subdir(String),
}

impl<T> Entry<T> {
    pub(crate) fn name(&self) -> &str {
        match self {
            Entry::Item(n, _) | Entry::Subdir(n) => n,
        }
    }
}

/// A plain-text listing: one name per line.
pub(crate) fn plain_listing<T>(entries: &[Entry<T>]) -> String {
    let mut s = String::new();
    for e in entries {
        s.push_str(e.name());
        s.push('\n');
    }
    s
}

/// Applies prefix, delimiter, markers, reverse and limit to a sorted list of names.
pub(crate) fn filter_names<T>(items: Vec<(String, T)>, q: &ListQuery) -> Vec<Entry<T>> {
    let mut out: Vec<Entry<T>> = Vec::new();
    for (name, v) in items {
        if !name.starts_with(&q.prefix) {
            continue;
        }
        if let Some(d) = &q.delimiter {
            if let Some(i) = name[q.prefix.len()..].find(d.as_str()) {
                let sub = &name[..q.prefix.len() + i + d.len()];
                if !matches!(out.last(), Some(Entry::Subdir(s)) if s == sub) {
                    out.push(Entry::Subdir(sub.to_string()));
                }
                continue;
            }
        }
        out.push(Entry::Item(name, v));
    }
    let (lo, hi) = if q.reverse {
        (q.end_marker.as_deref(), q.marker.as_deref())
    } else {
        (q.marker.as_deref(), q.end_marker.as_deref())
    };
    out.retain(|e| lo.is_none_or(|m| e.name() > m) && hi.is_none_or(|m| e.name() < m));
    if q.reverse {
        out.reverse();
    }
    out.truncate(q.limit);
    out
}

impl SwiftApi {
    /// A container listing page.
    pub(crate) fn list_container(
        &self,
        owner: &str,
        c: &str,
        q: &ListQuery,
    ) -> Res<Vec<Entry<ObjectRecord>>> {
        let layer = &self.inner.layer;
        let mut params = ListParams {
            prefix: q.prefix.clone(),
            delimiter: q.delimiter.clone(),
            start_after: None,
            max_keys: usize::MAX,
        };
        let mut entries: Vec<Entry<ObjectRecord>> = Vec::new();
        if q.reverse {
            // Everything after end_marker, then reversed in memory.
            params.start_after = q.end_marker.clone();
        } else {
            params.start_after = q.marker.clone();
            params.max_keys = q.limit + 1;
        }
        if params.max_keys == 0 {
            return Ok(entries);
        }
        let r = layer.list_objects(owner, c, &params).map_err(obj_err)?;
        let mut objs = r.objects.into_iter().peekable();
        let mut cps = r.common_prefixes.into_iter().peekable();
        loop {
            let take_obj = match (objs.peek(), cps.peek()) {
                (Some((k, _)), Some(p)) => k < p,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_obj {
                let (k, v) = objs.next().expect("peeked");
                entries.push(Entry::Item(k, v));
            } else {
                entries.push(Entry::Subdir(cps.next().expect("peeked")));
            }
        }
        if q.path {
            // Names directly under the path: no `/` after it except a last one
            // (directory markers).
            let plen = q.prefix.len();
            entries.retain(|e| {
                let rest = &e.name()[plen..];
                !rest.is_empty() && !rest.strip_suffix('/').unwrap_or(rest).contains('/')
            });
        }
        let (lo, hi) = if q.reverse {
            (q.end_marker.as_deref(), q.marker.as_deref())
        } else {
            (q.marker.as_deref(), q.end_marker.as_deref())
        };
        entries.retain(|e| lo.is_none_or(|m| e.name() > m) && hi.is_none_or(|m| e.name() < m));
        if q.reverse {
            entries.reverse();
        }
        entries.truncate(q.limit);
        Ok(entries)
    }
}
