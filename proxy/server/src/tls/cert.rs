//! What the banner and `/metrics` say of a certificate: its fingerprint and
//! its expiry, read from the DER without an X.509 library.

use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// SHA-256 of a certificate, as `AB:CD:...`.
pub fn fingerprint(cert: &[u8]) -> String {
    Sha256::digest(cert)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// One DER element: (tag, contents, rest).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&len0, rest) = rest.split_first()?;
    let (len, rest) = if len0 < 0x80 {
        (len0 as usize, rest)
    } else {
        let n = (len0 & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The `notAfter` of an X.509 certificate, seconds since the Unix epoch.
pub fn not_after(cert: &[u8]) -> Option<u64> {
    let (0x30, c, _) = der(cert)? else {
        return None;
    };
    let (0x30, tbs, _) = der(c)? else { return None };
    let (tag, _, mut rest) = der(tbs)?;
    if tag == 0xa0 {
        // [0] version, then the serial number.
        rest = der(rest)?.2;
    }
    let rest = der(rest)?.2; // signature algorithm
    let rest = der(rest)?.2; // issuer
    let (0x30, validity, _) = der(rest)? else {
        return None;
    };
    let (_, _, r) = der(validity)?; // notBefore
    let (tag, t, _) = der(r)?;
    let t = std::str::from_utf8(t).ok()?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = t.get(0..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, t.get(2..)?)
        }
        0x18 => (t.get(0..4)?.parse().ok()?, t.get(4..)?),
        _ => return None,
    };
    let num = |r: std::ops::Range<usize>| -> Option<i64> { rest.get(r)?.parse().ok() };
    let (mo, d, h, mi, s) = (num(0..2)?, num(2..4)?, num(4..6)?, num(6..8)?, num(8..10)?);
    if rest.get(10..) != Some("Z") {
        return None;
    }
    u64::try_from(unix_seconds(year, mo, d, h, mi, s)?).ok()
}

/// Seconds since the Unix epoch of a UTC date and time (proleptic Gregorian);
/// `None` for a date or time that does not exist.
pub(super) fn unix_seconds(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    let month = time::Month::try_from(u8::try_from(mo).ok()?).ok()?;
    let date = time::Date::from_calendar_date(i32::try_from(y).ok()?, month, u8::try_from(d).ok()?)
        .ok()?;
    let at = time::Time::from_hms(
        u8::try_from(h).ok()?,
        u8::try_from(mi).ok()?,
        u8::try_from(s).ok()?,
    )
    .ok()?;
    Some(
        time::PrimitiveDateTime::new(date, at)
            .assume_utc()
            .unix_timestamp(),
    )
}

/// Seconds since the Unix epoch now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}
