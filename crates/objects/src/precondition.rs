//! Conditional requests (RFC 7232): one evaluation for both front-ends.
//!
//! A front-end parses its headers (`If-Match`, `If-None-Match`,
//! `If-Modified-Since`, `If-Unmodified-Since`, or S3's `x-amz-copy-source-if-*`)
//! into [`Preconditions`] and calls [`Preconditions::evaluate`] with the validators
//! of the object it opened. Invalid dates are left out by the front-end (the RFC
//! says to ignore them).
//!
//! The two dialects differ only where the services differ:
//!
//! | | S3 ([`Dialect::S3`]) | Swift ([`Dialect::Swift`]) |
//! |---|---|---|
//! | order | RFC 7232 §6: If-Match, else If-Unmodified-Since; If-None-Match, else If-Modified-Since | the same, but If-Unmodified-Since is checked even when If-Match is present (swob checks every header it gets) |
//! | If-Match | strong comparison (a `W/` tag never matches) | `W/` ignored |
//! | If-None-Match | weak comparison (`W/` ignored) | `W/` ignored |
//! | Last-Modified seconds | the time truncated (what S3 sends) | the time rounded up (what Swift sends) |

use crate::error::{ObjectError, Result};
use crate::records::ObjectRecord;

/// One entity tag of a list: its value without quotes, and whether it was weak
/// (`W/"..."`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntityTag {
    /// Whether the tag was sent as weak.
    pub weak: bool,
    /// The tag without `W/` and quotes.
    pub tag: String,
}

/// The value of an `If-Match` / `If-None-Match` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtagList {
    /// `*`: any current representation.
    Any,
    /// A comma-separated list of entity tags.
    Tags(Vec<EntityTag>),
}

impl EtagList {
    /// Parses a header value: `*`, or entity tags separated by commas, each
    /// quoted or not, optionally `W/`.
    pub fn parse(header: &str) -> Self {
        let mut tags = Vec::new();
        for t in header.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if t == "*" {
                return EtagList::Any;
            }
            let (weak, t) = match t.strip_prefix("W/") {
                Some(rest) => (true, rest),
                None => (false, t),
            };
            tags.push(EntityTag {
                weak,
                tag: t.trim_matches('"').to_string(),
            });
        }
        EtagList::Tags(tags)
    }

    /// One strong tag.
    pub fn tag(etag: impl Into<String>) -> Self {
        EtagList::Tags(vec![EntityTag {
            weak: false,
            tag: etag.into(),
        }])
    }

    /// Whether the list matches `etag` (without quotes); `strong`: weak tags in
    /// the list never match.
    fn matches(&self, etag: &str, strong: bool) -> bool {
        let etag = etag.trim_matches('"');
        match self {
            EtagList::Any => true,
            EtagList::Tags(tags) => tags
                .iter()
                .any(|t| !(strong && t.weak) && (t.tag == etag || t.tag == "*")),
        }
    }
}

/// Which service's reading of RFC 7232 to apply (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Amazon S3 (and MinIO): RFC 7232 §6 precedence.
    S3,
    /// OpenStack Swift (swob).
    Swift,
}

impl Dialect {
    /// The Last-Modified second this dialect reports for a time in milliseconds.
    pub fn modified_secs(self, ms: i64) -> i64 {
        let ms = ms.max(0);
        match self {
            Dialect::S3 => ms / 1000,
            Dialect::Swift => (ms + 999) / 1000,
        }
    }
}

/// What conditions are checked against: an object's entity tag and modification
/// time.
#[derive(Clone, Copy, Debug)]
pub struct Validators<'a> {
    /// The entity tag, without quotes.
    pub etag: &'a str,
    /// Last modification, milliseconds since the Unix epoch.
    pub modified_ms: i64,
}

impl<'a> Validators<'a> {
    /// The validators of a stored object.
    pub fn of(rec: &'a ObjectRecord) -> Self {
        Self {
            etag: &rec.etag,
            modified_ms: rec.modified_ms,
        }
    }
}

/// The conditions of a request. `None` fields were not sent (or, for dates, were
/// not valid dates).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// `If-Match`.
    pub if_match: Option<EtagList>,
    /// `If-None-Match`.
    pub if_none_match: Option<EtagList>,
    /// `If-Modified-Since`, seconds since the Unix epoch.
    pub if_modified_since: Option<i64>,
    /// `If-Unmodified-Since`, seconds since the Unix epoch.
    pub if_unmodified_since: Option<i64>,
}

impl Preconditions {
    /// Whether no condition was sent.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Evaluates the conditions against the current object (`None`: there is
    /// none). `read`: a GET or HEAD, where a failed If-None-Match or
    /// If-Modified-Since means "not modified"; for every other method it is a
    /// failed precondition.
    ///
    /// # Errors
    /// [`ObjectError::PreconditionFailed`] (412) or [`ObjectError::NotModified`]
    /// (304).
    pub fn evaluate(
        &self,
        current: Option<Validators<'_>>,
        read: bool,
        dialect: Dialect,
    ) -> Result<()> {
        let not_modified = || {
            if read {
                ObjectError::NotModified
            } else {
                ObjectError::PreconditionFailed("the object was not modified".into())
            }
        };
        let modified = current.map(|v| dialect.modified_secs(v.modified_ms));
        if let Some(list) = &self.if_match {
            let ok = current.is_some_and(|v| list.matches(v.etag, dialect == Dialect::S3));
            if !ok {
                return Err(ObjectError::PreconditionFailed(
                    "If-Match did not match".into(),
                ));
            }
        }
        if self.if_match.is_none() || dialect == Dialect::Swift {
            if let (Some(t), Some(m)) = (self.if_unmodified_since, modified) {
                if m > t {
                    return Err(ObjectError::PreconditionFailed(
                        "modified since If-Unmodified-Since".into(),
                    ));
                }
            }
        }
        if let Some(list) = &self.if_none_match {
            if current.is_some_and(|v| list.matches(v.etag, false)) {
                return Err(not_modified());
            }
        } else if let (Some(t), Some(m)) = (self.if_modified_since, modified) {
            if m <= t {
                return Err(not_modified());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_000;

    fn v(etag: &str) -> Option<Validators<'_>> {
        Some(Validators {
            etag,
            modified_ms: T * 1000 + 500,
        })
    }

    fn p() -> Preconditions {
        Preconditions::default()
    }

    fn is_412(r: Result<()>) -> bool {
        matches!(r, Err(ObjectError::PreconditionFailed(_)))
    }

    #[test]
    fn parsing() {
        assert_eq!(EtagList::parse(" * "), EtagList::Any);
        assert_eq!(
            EtagList::parse("\"a\", W/\"b\",c"),
            EtagList::Tags(vec![
                EntityTag {
                    weak: false,
                    tag: "a".into()
                },
                EntityTag {
                    weak: true,
                    tag: "b".into()
                },
                EntityTag {
                    weak: false,
                    tag: "c".into()
                },
            ])
        );
    }

    #[test]
    fn rfc_7232_precedence_for_s3() {
        let d = Dialect::S3;
        // If-Match true wins over a failing If-Unmodified-Since (S3: 200).
        let c = Preconditions {
            if_match: Some(EtagList::parse("\"abc\"")),
            if_unmodified_since: Some(T - 10),
            ..p()
        };
        assert!(c.evaluate(v("abc"), true, d).is_ok());
        // ... but not for Swift, which checks both.
        assert!(is_412(c.evaluate(v("abc"), true, Dialect::Swift)));
        // If-None-Match false (it matches) with If-Modified-Since true: 304.
        let c = Preconditions {
            if_none_match: Some(EtagList::parse("\"abc\"")),
            if_modified_since: Some(T - 10),
            ..p()
        };
        assert!(matches!(
            c.evaluate(v("abc"), true, d),
            Err(ObjectError::NotModified)
        ));
        // ... and 412 when not reading (copy sources, writes).
        assert!(is_412(c.evaluate(v("abc"), false, d)));
        // If-None-Match true: If-Modified-Since is not looked at.
        let c = Preconditions {
            if_none_match: Some(EtagList::parse("\"other\"")),
            if_modified_since: Some(T + 10),
            ..p()
        };
        assert!(c.evaluate(v("abc"), true, d).is_ok());
        // If-Match on a missing object fails; If-None-Match: * on one passes.
        let c = Preconditions {
            if_match: Some(EtagList::Any),
            ..p()
        };
        assert!(is_412(c.evaluate(None, false, d)));
        let c = Preconditions {
            if_none_match: Some(EtagList::Any),
            ..p()
        };
        assert!(c.evaluate(None, false, d).is_ok());
        assert!(is_412(c.evaluate(v("x"), false, d)));
    }

    #[test]
    fn dates_use_the_reported_second() {
        // Modified at T.5 s: S3 reports T, Swift reports T + 1.
        let c = Preconditions {
            if_modified_since: Some(T),
            ..p()
        };
        assert!(matches!(
            c.evaluate(v("e"), true, Dialect::S3),
            Err(ObjectError::NotModified)
        ));
        assert!(c.evaluate(v("e"), true, Dialect::Swift).is_ok());
        let c = Preconditions {
            if_unmodified_since: Some(T),
            ..p()
        };
        assert!(c.evaluate(v("e"), true, Dialect::S3).is_ok());
        assert!(is_412(c.evaluate(v("e"), true, Dialect::Swift)));
    }

    #[test]
    fn weak_and_strong_comparison() {
        let weak = || Some(EtagList::parse("W/\"abc\""));
        let c = Preconditions {
            if_match: weak(),
            ..p()
        };
        assert!(is_412(c.evaluate(v("abc"), true, Dialect::S3)), "strong");
        assert!(c.evaluate(v("abc"), true, Dialect::Swift).is_ok());
        let c = Preconditions {
            if_none_match: weak(),
            ..p()
        };
        assert!(matches!(
            c.evaluate(v("abc"), true, Dialect::S3),
            Err(ObjectError::NotModified)
        ));
        // Quotes on the stored tag do not matter (a large object's joined ETag).
        let c = Preconditions {
            if_match: Some(EtagList::parse("abc")),
            ..p()
        };
        assert!(c.evaluate(v("\"abc\""), true, Dialect::Swift).is_ok());
        assert!(p().is_empty() && !c.is_empty());
    }
}
