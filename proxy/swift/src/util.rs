//! Small protocol helpers: dates, ranges, query strings, escaping.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Last-modified seconds as Swift reports them: the timestamp rounded up.
pub fn modified_secs(ms: i64) -> i64 {
    (ms.max(0) + 999) / 1000
}

/// `Last-Modified` / `Date` form.
pub fn http_date_secs(secs: i64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64))
}

/// The current time as an HTTP date.
pub fn http_now() -> String {
    httpdate::fmt_http_date(SystemTime::now())
}

/// The current time in seconds since the Unix epoch.
pub fn unix_now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// An HTTP date as seconds since the epoch (`None` if unparsable).
pub fn parse_http_date(s: &str) -> Option<i64> {
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64)
}

/// `X-Timestamp` form: seconds with five decimals.
pub fn x_timestamp(ms: i64) -> String {
    let ms = ms.max(0);
    format!("{}.{:05}", ms / 1000, (ms % 1000) * 100)
}

/// The last millisecond of the year 9999, the last [`time`] represents.
const LAST_ISO_MS: i64 = 253_402_300_799_999;

/// Listing form: `2024-01-02T03:04:05.678000` (UTC). A time before the epoch is
/// the epoch; a time past the year 9999 (no clock's) is its last millisecond.
pub fn iso_date(ms: i64) -> String {
    let ms = ms.clamp(0, LAST_ISO_MS);
    let t = time::OffsetDateTime::from_unix_timestamp(ms / 1000)
        .expect("the years 1970 to 9999 are representable");
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        (ms % 1000) * 1000
    )
}

/// Escapes text for XML character data and attribute values.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-decodes `s` (and `+` as space when `plus` is set) into bytes.
pub fn percent_decode(s: &str, plus: bool) -> Vec<u8> {
    if plus {
        let s = s.replace('+', " ");
        percent_encoding::percent_decode_str(&s).collect()
    } else {
        percent_encoding::percent_decode_str(s).collect()
    }
}

/// Bytes that must be percent-encoded in a URL path segment we generate.
const PATH_SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Percent-encodes a path (keeping `/`).
pub fn percent_encode_path(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, PATH_SET).to_string()
}

/// A query string's parameters, decoded as form data. `Err` if a name or value is
/// not UTF-8, or a name contains NUL (values may: markers like `name\0`).
pub fn parse_query(q: Option<&str>) -> Result<Vec<(String, String)>, ()> {
    let mut out = Vec::new();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = String::from_utf8(percent_decode(k, true)).map_err(|_| ())?;
        let v = String::from_utf8(percent_decode(v, true)).map_err(|_| ())?;
        if k.contains('\0') {
            return Err(());
        }
        out.push((k, v));
    }
    Ok(out)
}

/// A parsed `Range` header: `(first, last)` byte positions as written; `None`
/// entries stand for an open end (`first-`) or a suffix (`-n`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-last` or `first-` (last = None).
    From(u64, Option<u64>),
    /// `-n`: the last n bytes.
    Suffix(u64),
}

/// Parses `bytes=...`; `None` if the header is malformed (Swift then ignores it).
pub fn parse_range(h: &str) -> Option<Vec<RangeSpec>> {
    // Linear white space is allowed around every token, and the unit is
    // case-insensitive.
    let compact: String = h.chars().filter(|c| !c.is_whitespace()).collect();
    let lower = compact.to_ascii_lowercase();
    let rest = lower.strip_prefix("bytes=")?;
    let mut out = Vec::new();
    for part in rest.split(',') {
        let part = part.trim();
        let (a, b) = part.split_once('-')?;
        let (a, b) = (a.trim(), b.trim());
        if a.is_empty() {
            if b.is_empty() {
                return None;
            }
            out.push(RangeSpec::Suffix(b.parse().ok()?));
        } else {
            let first: u64 = a.parse().ok()?;
            let last = if b.is_empty() {
                None
            } else {
                Some(b.parse::<u64>().ok()?)
            };
            if last.is_some_and(|l| l < first) {
                return None;
            }
            out.push(RangeSpec::From(first, last));
        }
    }
    if out.is_empty() {
        return None;
    }
    Some(out)
}

/// The satisfiable ranges of `specs` for an object of `size` bytes, as half-open
/// byte ranges, in request order.
pub fn satisfiable(specs: &[RangeSpec], size: u64) -> Vec<std::ops::Range<u64>> {
    specs
        .iter()
        .filter_map(|s| match *s {
            RangeSpec::From(first, last) if first < size => {
                Some(first..last.map_or(size, |l| l.saturating_add(1).min(size)))
            }
            RangeSpec::Suffix(n) if n > 0 && size > 0 => Some(size - n.min(size)..size),
            _ => None,
        })
        .collect()
}

/// Constant-time equality of two byte strings (lengths may leak).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A content type guessed from a name's extension.
pub fn guess_content_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "txt" | "text" | "log" => "text/plain",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "js" => "text/javascript",
        "json" => "application/json",
        "xml" => "application/xml",
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "tar" => "application/x-tar",
        "mp4" => "video/mp4",
        "mp3" => "audio/mpeg",
        "wav" => "audio/x-wav",
        "ogg" => "audio/ogg",
        "webm" => "video/webm",
        "avi" => "video/x-msvideo",
        "doc" => "application/msword",
        "rtf" => "application/rtf",
        "md" => "text/markdown",
        "py" => "text/x-python",
        "sh" => "application/x-sh",
        "ico" => "image/vnd.microsoft.icon",
        "bmp" => "image/bmp",
        "tif" | "tiff" => "image/tiff",
        "webp" => "image/webp",
        _ => "application/octet-stream",
    }
}

/// Splits `container/object` (an optional leading `/`).
pub(crate) fn split_object_path(p: &str) -> Option<(String, String)> {
    let p = p.strip_prefix('/').unwrap_or(p);
    let (c, o) = p.split_once('/')?;
    (!c.is_empty() && !o.is_empty()).then(|| (c.to_string(), o.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(iso_date(0), "1970-01-01T00:00:00.000000");
        assert_eq!(iso_date(1_709_251_199_123), "2024-02-29T23:59:59.123000");
        assert_eq!(x_timestamp(1_500), "1.50000");
        assert_eq!(modified_secs(1_001), 2);
        let d = http_date_secs(784_111_777);
        assert_eq!(d, "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse_http_date(&d), Some(784_111_777));
        assert_eq!(parse_http_date("yesterday"), None);
    }

    /// Howard Hinnant's civil-date algorithm: the reference `iso_date` must
    /// match byte for byte.
    fn hinnant_iso_date(ms: i64) -> String {
        let ms = ms.max(0);
        let secs = ms / 1000;
        let days = secs / 86_400;
        let rem = secs % 86_400;
        // Civil date from days since 1970-01-01.
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            (ms % 1000) * 1000
        )
    }

    #[test]
    fn iso_dates_match_the_civil_date_arithmetic() {
        let day = 86_400_000i64;
        let edges = [
            0,
            999,
            day - 1,
            // Leap days: 2000-02-29 (a year divisible by 400), the last
            // millisecond of 2024-02-29 and the day after; 2100 has none.
            951_782_400_000,
            1_709_251_199_123,
            1_709_251_200_000,
            4_107_542_399_999,
            4_107_542_400_000,
            // The signed 32-bit end (2038), after it, and the unsigned one (2106).
            2_147_483_647_000,
            2_147_483_648_000,
            4_102_444_799_999,
            4_294_967_296_000,
            LAST_ISO_MS,
        ];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let sweep = (0..20_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % LAST_ISO_MS as u64) as i64
        });
        for ms in edges
            .into_iter()
            .chain(sweep)
            .chain((0..3_000).map(|d| d * day - 1))
        {
            assert_eq!(iso_date(ms), hinnant_iso_date(ms), "{ms}");
        }
        assert_eq!(iso_date(-5), "1970-01-01T00:00:00.000000");
        assert_eq!(iso_date(LAST_ISO_MS), "9999-12-31T23:59:59.999000");
    }

    #[test]
    fn ranges() {
        use RangeSpec::*;
        assert_eq!(
            parse_range("bytes=0-4,-3,10-"),
            Some(vec![From(0, Some(4)), Suffix(3), From(10, None)])
        );
        assert_eq!(parse_range("bytes=5-1"), None);
        assert_eq!(parse_range("BYTES = 0 - 9 "), Some(vec![From(0, Some(9))]));
        assert_eq!(parse_range("bytes=x-1"), None);
        assert_eq!(parse_range("items=0-1"), None);
        assert_eq!(parse_range("bytes=-"), None);
        let r = parse_range("bytes=0-4,-3,10-,100-200").unwrap();
        assert_eq!(satisfiable(&r, 20), vec![0..5, 17..20, 10..20]);
        assert_eq!(satisfiable(&[Suffix(50)], 20), vec![0..20]);
        assert!(satisfiable(&[Suffix(0)], 20).is_empty());
        assert!(satisfiable(&[From(0, None)], 0).is_empty());
        // The largest last byte a client can send does not overflow.
        assert_eq!(satisfiable(&[From(5, Some(u64::MAX))], 20), vec![5..20]);
    }

    #[test]
    fn query_and_escapes() {
        assert_eq!(
            parse_query(Some("a=1&b=%C3%A9+x&flag")).unwrap(),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "é x".into()),
                ("flag".into(), String::new())
            ]
        );
        assert!(parse_query(Some("a=%FF")).is_err());
        assert!(parse_query(Some("a%00=1")).is_err());
        assert_eq!(parse_query(Some("a=b%00")).unwrap()[0].1, "b\0");
        assert_eq!(xml_escape("<a&'\">"), "&lt;a&amp;&apos;&quot;&gt;");
        assert_eq!(percent_encode_path("a b/ü"), "a%20b/%C3%BC");
        assert!(ct_eq(b"abc", b"abc") && !ct_eq(b"abc", b"abd") && !ct_eq(b"ab", b"abc"));
    }
}
