//! Provider price tables and the arithmetic that turns the cost report's
//! measured usage into dollars.
//!
//! A price table is a flat TOML (or JSON: a file ending in `.json`, or whose
//! text starts with `{`) file of these fields; money is in US dollars:
//!
//! | field | meaning | required |
//! |---|---|---|
//! | `name` | the provider, service, storage class and region | yes |
//! | `source` | where the figures were taken from (a URL, a page) | yes |
//! | `date` | when they were taken, `YYYY-MM-DD` | yes |
//! | `notes` | doubts, tiers left out, what else applies | no |
//! | `gb_bytes` | bytes in the provider's billing "GB" (2³⁰ or 10⁹) | no, 2³⁰ |
//! | `storage_gb_month` | $ per GB-month stored | yes |
//! | `put_per_1000` | $ per 1,000 PUT, COPY and POST requests | yes |
//! | `list_per_1000` | $ per 1,000 LIST requests | no, `put_per_1000` |
//! | `get_per_1000` | $ per 1,000 GET requests (ranged ones too) and others | yes |
//! | `head_per_1000` | $ per 1,000 HEAD requests | no, `get_per_1000` |
//! | `delete_per_1000` | $ per 1,000 DELETE requests | no, 0 |
//! | `egress_internet_gb` | $ per GB sent from the bucket to the internet | yes |
//! | `transfer_in_region_gb` | $ per GB between the bucket and a VM in its region, either way | yes |
//! | `ingress_gb` | $ per GB sent to the bucket from the internet | no, 0 |
//!
//! An unknown field is an error (a misspelt price must not silently count as
//! zero), and so is a negative or non-numeric price.

use std::collections::BTreeMap;
use std::path::Path;

/// The two tables shipped with the runner (`tools/workload/prices/`), used
/// when `--prices` names none: (file name, text).
pub const SHIPPED: [(&str, &str); 2] = [
    (
        "aws-s3-standard-us-east-1.toml",
        include_str!("../../prices/aws-s3-standard-us-east-1.toml"),
    ),
    (
        "ibm-cos-standard-us-south.toml",
        include_str!("../../prices/ibm-cos-standard-us-south.toml"),
    ),
];

/// Why a price table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Not valid TOML (or JSON), or not a table of fields.
    #[error("{file}: not a price table: {message}")]
    Syntax {
        /// The file.
        file: String,
        /// What the parser said.
        message: String,
    },
    /// A required field is absent.
    #[error("{file}: field `{field}` is missing ({meaning})")]
    Missing {
        /// The file.
        file: String,
        /// The field.
        field: &'static str,
        /// What it is.
        meaning: &'static str,
    },
    /// A field of the wrong type, or a price below zero or not finite.
    #[error("{file}: field `{field}` must be {expected}, not {got}")]
    Invalid {
        /// The file.
        file: String,
        /// The field.
        field: String,
        /// What it must be.
        expected: &'static str,
        /// What it is.
        got: String,
    },
    /// A field this table does not know (a misspelling would price it at 0).
    #[error("{file}: unknown field `{field}` (known: {known})")]
    Unknown {
        /// The file.
        file: String,
        /// The field.
        field: String,
        /// The fields a table may have.
        known: String,
    },
}

/// A provider's prices, in US dollars.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceTable {
    /// Provider, service, storage class and region.
    pub name: String,
    /// Where the figures come from.
    pub source: String,
    /// When they were taken.
    pub date: String,
    /// Doubts and what is left out.
    pub notes: String,
    /// Bytes in the provider's billing GB.
    pub gb_bytes: f64,
    /// $ per GB-month stored.
    pub storage_gb_month: f64,
    /// $ per 1,000 PUT (COPY, POST).
    pub put_per_1000: f64,
    /// $ per 1,000 LIST.
    pub list_per_1000: f64,
    /// $ per 1,000 GET, whole or ranged.
    pub get_per_1000: f64,
    /// $ per 1,000 HEAD.
    pub head_per_1000: f64,
    /// $ per 1,000 DELETE.
    pub delete_per_1000: f64,
    /// $ per GB from the bucket to the internet.
    pub egress_internet_gb: f64,
    /// $ per GB between the bucket and a VM in its region.
    pub transfer_in_region_gb: f64,
    /// $ per GB from the internet to the bucket.
    pub ingress_gb: f64,
}

/// A field's value, TOML or JSON alike.
enum Value {
    Num(f64),
    Text(String),
    Other(String),
}

/// (field, meaning, required).
const FIELDS: [(&str, &str, bool); 14] = [
    ("name", "the provider, service, class and region", true),
    ("source", "where the figures were taken from", true),
    ("date", "when they were taken, YYYY-MM-DD", true),
    ("notes", "doubts and what is left out", false),
    ("gb_bytes", "bytes in a billing GB", false),
    ("storage_gb_month", "$ per GB-month stored", true),
    (
        "put_per_1000",
        "$ per 1,000 PUT, COPY and POST requests",
        true,
    ),
    ("list_per_1000", "$ per 1,000 LIST requests", false),
    ("get_per_1000", "$ per 1,000 GET and other requests", true),
    ("head_per_1000", "$ per 1,000 HEAD requests", false),
    ("delete_per_1000", "$ per 1,000 DELETE requests", false),
    (
        "egress_internet_gb",
        "$ per GB from the bucket to the internet",
        true,
    ),
    (
        "transfer_in_region_gb",
        "$ per GB between the bucket and a VM in its region",
        true,
    ),
    (
        "ingress_gb",
        "$ per GB from the internet to the bucket",
        false,
    ),
];

impl PriceTable {
    /// Reads the table in `path`.
    pub fn load(path: &Path) -> Result<Self, PriceError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Io {
            file: file.clone(),
            source,
        })?;
        let json = path.extension().is_some_and(|e| e == "json");
        Self::parse(&file, &text, json)
    }

    /// Parses `text` (named `file` in errors): JSON if `json` or if it starts
    /// with `{`, else TOML.
    pub fn parse(file: &str, text: &str, json: bool) -> Result<Self, PriceError> {
        let syntax = |message: String| PriceError::Syntax {
            file: file.to_string(),
            message,
        };
        let mut fields: BTreeMap<String, Value> = BTreeMap::new();
        if json || text.trim_start().starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?;
            let obj = v
                .as_object()
                .ok_or_else(|| syntax("the top level is not an object".into()))?;
            for (k, v) in obj {
                let val = match v {
                    serde_json::Value::Number(n) => Value::Num(n.as_f64().unwrap_or(f64::NAN)),
                    serde_json::Value::String(s) => Value::Text(s.clone()),
                    other => Value::Other(other.to_string()),
                };
                fields.insert(k.clone(), val);
            }
        } else {
            let t: toml::Table = toml::from_str(text).map_err(|e| syntax(e.to_string()))?;
            for (k, v) in t {
                let val = match v {
                    toml::Value::Float(f) => Value::Num(f),
                    toml::Value::Integer(i) => Value::Num(i as f64),
                    toml::Value::String(s) => Value::Text(s),
                    other => Value::Other(other.to_string()),
                };
                fields.insert(k, val);
            }
        }
        if let Some(k) = fields
            .keys()
            .find(|k| !FIELDS.iter().any(|(f, _, _)| f == k))
        {
            return Err(PriceError::Unknown {
                file: file.to_string(),
                field: k.clone(),
                known: FIELDS.map(|(f, _, _)| f).join(", "),
            });
        }
        for (f, meaning, required) in FIELDS {
            if required && !fields.contains_key(f) {
                return Err(PriceError::Missing {
                    file: file.to_string(),
                    field: f,
                    meaning,
                });
            }
        }
        let invalid = |field: &str, expected: &'static str, got: String| PriceError::Invalid {
            file: file.to_string(),
            field: field.to_string(),
            expected,
            got,
        };
        let text_of = |f: &str| -> Result<String, PriceError> {
            match fields.get(f) {
                None => Ok(String::new()),
                Some(Value::Text(s)) => Ok(s.clone()),
                Some(Value::Num(n)) => Err(invalid(f, "text", n.to_string())),
                Some(Value::Other(o)) => Err(invalid(f, "text", o.clone())),
            }
        };
        let num = |f: &str, default: Option<f64>| -> Result<f64, PriceError> {
            let n = match fields.get(f) {
                None => return Ok(default.expect("required fields are present")),
                Some(Value::Num(n)) => *n,
                Some(Value::Text(s)) => return Err(invalid(f, "a number", format!("{s:?}"))),
                Some(Value::Other(o)) => return Err(invalid(f, "a number", o.clone())),
            };
            if n.is_finite() && n >= 0.0 {
                Ok(n)
            } else {
                Err(invalid(f, "a price of zero or more", n.to_string()))
            }
        };
        let put = num("put_per_1000", None)?;
        let get = num("get_per_1000", None)?;
        let gb_bytes = num("gb_bytes", Some((1u64 << 30) as f64))?;
        if gb_bytes < 1.0 {
            return Err(invalid("gb_bytes", "a byte count", gb_bytes.to_string()));
        }
        Ok(Self {
            name: text_of("name")?,
            source: text_of("source")?,
            date: text_of("date")?,
            notes: text_of("notes")?,
            gb_bytes,
            storage_gb_month: num("storage_gb_month", None)?,
            put_per_1000: put,
            list_per_1000: num("list_per_1000", Some(put))?,
            get_per_1000: get,
            head_per_1000: num("head_per_1000", Some(get))?,
            delete_per_1000: num("delete_per_1000", Some(0.0))?,
            egress_internet_gb: num("egress_internet_gb", None)?,
            transfer_in_region_gb: num("transfer_in_region_gb", None)?,
            ingress_gb: num("ingress_gb", Some(0.0))?,
        })
    }

    /// The shipped tables.
    pub fn shipped() -> Vec<Self> {
        SHIPPED
            .iter()
            .map(|(f, t)| Self::parse(f, t, false).expect("the shipped price tables parse"))
            .collect()
    }

    /// $ per month for keeping `bytes` stored.
    pub fn storage_usd_month(&self, bytes: f64) -> f64 {
        bytes / self.gb_bytes * self.storage_gb_month
    }

    /// $ for the requests of `t`.
    pub fn requests_usd(&self, t: &Traffic) -> f64 {
        ((t.get + t.get_range) * self.get_per_1000
            + t.put * self.put_per_1000
            + t.list * self.list_per_1000
            + t.head * self.head_per_1000
            + t.delete * self.delete_per_1000)
            / 1000.0
    }

    /// $ for the bytes `t` moves between the proxy and the bucket, and the
    /// `client_down` bytes the client reads, in `model` (see [`CloudModel`]).
    pub fn transfer_usd(&self, t: &Traffic, model: CloudModel, client_down: f64) -> f64 {
        let gb = |b: f64| b / self.gb_bytes;
        match model {
            CloudModel::Public => {
                gb(t.bytes_down) * self.egress_internet_gb + gb(t.bytes_up) * self.ingress_gb
            }
            CloudModel::Private => {
                gb(t.bytes_down + t.bytes_up) * self.transfer_in_region_gb
                    + gb(client_down) * self.egress_internet_gb
            }
        }
    }

    /// $ for `t` (requests and transfer) in `model`.
    pub fn traffic_usd(&self, t: &Traffic, model: CloudModel, client_down: f64) -> f64 {
        self.requests_usd(t) + self.transfer_usd(t, model, client_down)
    }
}

/// Where the proxy runs, which decides what the bytes it moves cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloudModel {
    /// The proxy beside the client, outside the provider: every byte the proxy
    /// reads from the bucket is egress to the internet (`egress_internet_gb`),
    /// every byte it writes ingress (`ingress_gb`).
    Public,
    /// The proxy on a VM in the bucket's region: the proxy's traffic with the
    /// bucket is in-region (`transfer_in_region_gb`, both ways), and the bytes
    /// the client reads leave the region as egress. The VM is not priced.
    Private,
}

/// Requests by verb and bytes moved, as counts or as counts per client GiB.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    /// Whole-object GETs.
    pub get: f64,
    /// Ranged GETs.
    pub get_range: f64,
    /// PUTs.
    pub put: f64,
    /// DELETEs.
    pub delete: f64,
    /// LISTs.
    pub list: f64,
    /// HEADs.
    pub head: f64,
    /// Bytes from the bucket.
    pub bytes_down: f64,
    /// Bytes to the bucket.
    pub bytes_up: f64,
}

impl Traffic {
    /// Requests of every verb.
    pub fn requests(&self) -> f64 {
        self.get + self.get_range + self.put + self.delete + self.list + self.head
    }

    /// Every figure times `k`.
    pub fn scaled(&self, k: f64) -> Self {
        Self {
            get: self.get * k,
            get_range: self.get_range * k,
            put: self.put * k,
            delete: self.delete * k,
            list: self.list * k,
            head: self.head * k,
            bytes_down: self.bytes_down * k,
            bytes_up: self.bytes_up * k,
        }
    }

    /// The sum of two.
    pub fn plus(&self, o: &Self) -> Self {
        Self {
            get: self.get + o.get,
            get_range: self.get_range + o.get_range,
            put: self.put + o.put,
            delete: self.delete + o.delete,
            list: self.list + o.list,
            head: self.head + o.head,
            bytes_down: self.bytes_down + o.bytes_down,
            bytes_up: self.bytes_up + o.bytes_up,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    fn table() -> PriceTable {
        PriceTable::parse(
            "t.toml",
            "name = \"T\"\nsource = \"s\"\ndate = \"2026-01-01\"\nstorage_gb_month = 0.02\n\
             put_per_1000 = 0.005\nget_per_1000 = 0.0004\negress_internet_gb = 0.09\n\
             transfer_in_region_gb = 0.01\n",
            false,
        )
        .unwrap()
    }

    #[test]
    fn defaults_follow_the_documented_fields() {
        let t = table();
        assert_eq!(t.gb_bytes, GIB);
        assert_eq!(t.list_per_1000, 0.005, "LIST is priced as PUT unless given");
        assert_eq!(
            t.head_per_1000, 0.0004,
            "HEAD is priced as GET unless given"
        );
        assert_eq!((t.delete_per_1000, t.ingress_gb), (0.0, 0.0));
    }

    #[test]
    fn requests_and_transfer_are_priced_per_verb_and_model() {
        let t = table();
        let traffic = Traffic {
            get: 1000.0,
            get_range: 1000.0,
            put: 2000.0,
            delete: 5000.0,
            list: 1000.0,
            head: 1000.0,
            bytes_down: 2.0 * GIB,
            bytes_up: 4.0 * GIB,
        };
        // (1000 + 1000 + 1000 HEAD) × 0.0004 + (2000 + 1000 LIST) × 0.005, per 1,000.
        let req = 3.0 * 0.0004 + 3.0 * 0.005;
        assert!((t.requests_usd(&traffic) - req).abs() < 1e-12);
        // Public: 2 GB down at 0.09, uploads free.
        let public = t.transfer_usd(&traffic, CloudModel::Public, 1.0 * GIB);
        assert!((public - 0.18).abs() < 1e-12);
        // Private: 6 GB in-region at 0.01, plus the client's 1 GB out at 0.09.
        let private = t.transfer_usd(&traffic, CloudModel::Private, 1.0 * GIB);
        assert!((private - (0.06 + 0.09)).abs() < 1e-12);
        assert!((t.traffic_usd(&traffic, CloudModel::Public, 0.0) - (req + 0.18)).abs() < 1e-12);
        // Storage: 3 GiB for a month.
        assert!((t.storage_usd_month(3.0 * GIB) - 0.06).abs() < 1e-12);
        assert_eq!(traffic.requests(), 11000.0);
        assert_eq!(traffic.scaled(0.5).put, 1000.0);
        assert_eq!(traffic.plus(&traffic).bytes_up, 8.0 * GIB);
    }

    #[test]
    fn json_parses_like_toml() {
        let j = PriceTable::parse(
            "t.json",
            r#"{"name": "T", "source": "s", "date": "2026-01-01", "storage_gb_month": 0.02,
                "put_per_1000": 0.005, "get_per_1000": 0.0004, "egress_internet_gb": 0.09,
                "transfer_in_region_gb": 0.01}"#,
            true,
        )
        .unwrap();
        assert_eq!(j, table());
    }

    #[test]
    fn a_bad_file_gets_a_clear_error() {
        let base = "name = \"T\"\nsource = \"s\"\ndate = \"d\"\nstorage_gb_month = 0.02\n\
                    put_per_1000 = 0.005\nget_per_1000 = 0.0004\negress_internet_gb = 0.09\n\
                    transfer_in_region_gb = 0.0\n";
        let err = |text: &str| {
            PriceTable::parse("p.toml", text, false)
                .unwrap_err()
                .to_string()
        };
        let e = err(&base.replace("get_per_1000 = 0.0004\n", ""));
        assert!(
            e.contains("p.toml") && e.contains("`get_per_1000` is missing"),
            "{e}"
        );
        let e = err(&format!("{base}egres_internet_gb = 0.1\n"));
        assert!(e.contains("unknown field `egres_internet_gb`"), "{e}");
        let e = err(&base.replace("0.005", "\"0.005\""));
        assert!(e.contains("`put_per_1000` must be a number"), "{e}");
        let e = err(&base.replace("0.005", "-0.005"));
        assert!(
            e.contains("`put_per_1000` must be a price of zero or more"),
            "{e}"
        );
        let e = err("name = [");
        assert!(e.contains("p.toml: not a price table"), "{e}");
        let e = PriceTable::parse("p.json", "[1, 2]", true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an object"), "{e}");
        let missing = PriceTable::load(Path::new("/nonexistent/prices.toml")).unwrap_err();
        assert!(missing
            .to_string()
            .starts_with("/nonexistent/prices.toml: "));
    }

    #[test]
    fn the_shipped_tables_parse_and_are_dated() {
        let t = PriceTable::shipped();
        assert_eq!(t.len(), 2);
        for p in &t {
            assert!(!p.source.is_empty() && p.date.len() == 10, "{}", p.name);
            assert!(p.storage_gb_month > 0.0 && p.put_per_1000 > p.get_per_1000);
        }
    }
}
