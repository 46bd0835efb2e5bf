//! Number formats shared by the reports (the workload runner's and the speed
//! benchmark's).

/// `64K`, `1M`...
pub fn human(bytes: u64) -> String {
    match bytes {
        0 => "-".into(),
        b if b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

/// Bytes as MB (10⁶ bytes), two decimals.
pub fn mb(b: u64) -> String {
    format!("{:.2}", b as f64 / 1e6)
}

/// A ratio as `1.23×` (`123×` from 100 on; `—` for NaN).
pub fn x(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else if v >= 100.0 {
        format!("{v:.0}×")
    } else {
        format!("{v:.2}×")
    }
}

/// Milliseconds, two decimals below 10, one from 10 on (`—` for NaN).
pub fn ms(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// Bytes/s as MB/s (10⁶ bytes).
pub fn mbs(v: f64) -> String {
    let m = v / 1e6;
    if !m.is_finite() {
        "—".into()
    } else if m < 10.0 {
        format!("{m:.2}")
    } else {
        format!("{m:.1}")
    }
}

/// A fraction as a whole percentage (`—` if not finite).
pub fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.0} %", v * 100.0)
    } else {
        "—".into()
    }
}

/// Bytes in KiB, MiB or GiB.
pub fn bytes_h(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

/// `a / b` as a ratio to a yardstick: `12.6×`, or `1/98` below one half.
pub fn ratio(a: f64, b: f64) -> String {
    let r = a / b;
    if !r.is_finite() || r <= 0.0 {
        "—".into()
    } else if r < 0.5 {
        format!("1/{:.0}", 1.0 / r)
    } else {
        format!("{r:.2}×")
    }
}
