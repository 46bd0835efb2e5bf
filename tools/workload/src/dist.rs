//! Object contents and sizes: directories of real files, and the built-in synthetic
//! file sets of the thesis's workloads, generated reproducibly from a seed.
//!
//! A `files=` value that is not an existing directory names a built-in set by its
//! last path component: `A`..`E`, optionally with a suffix (`A-prepare` draws from
//! A's distribution with its own seed). File `i` of a synthetic set is named
//! `<oprefix><i>` (so that `objects=u(1,10)` reads what `prepare` wrote) and its
//! size and bytes depend only on the seed, the set's name and `i`.
//!
//! The distributions (sizes in bytes, powers of 1000 as COSBench):
//! - A (home user): 60 % log-normal around 2 KB (σ = 1.2), 40 % log-normal around
//!   2.5 MB (σ = 0.7), within 1 KB – 4 GB: bimodal, ~90 % below 4 MB;
//! - B (traveling user): A's distribution cut at 4 MB;
//! - C (email backup): uniform 10 – 25 MB;
//! - D (code distribution): log-normal around 1.84 KB (σ = 2.5), 10 B – 10 MB, the
//!   GitHub file-size shape (median 1.84 KB, mean ~50 KB);
//! - E (e-government): log-normal around 110 KB (σ = 2.0), 1 KB – 11 MB.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A stable 64-bit hash (FNV-1a) for deriving seeds from names.
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&[0xff]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A deterministic generator for `(seed, name, index)`.
pub fn rng_for(seed: u64, name: &str, index: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(stable_hash(&[
        &seed.to_le_bytes(),
        name.as_bytes(),
        &index.to_le_bytes(),
    ]))
}

/// `len` pseudo-random bytes determined by `(seed, name, index)`.
pub fn content(seed: u64, name: &str, index: u64, len: u64) -> Bytes {
    let mut rng = rng_for(seed ^ 0x5eed, name, index);
    let mut v = vec![0u8; len as usize];
    rng.fill_bytes(&mut v);
    Bytes::from(v)
}

fn normal(rng: &mut impl Rng) -> f64 {
    // Box-Muller.
    let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

fn log_normal(rng: &mut impl Rng, median: f64, sigma: f64) -> f64 {
    median * (sigma * normal(rng)).exp()
}

/// A built-in size distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeDist {
    /// Workload A.
    HomeUser,
    /// Workload B.
    TravelingUser,
    /// Workload C.
    EmailBackup,
    /// Workload D.
    CodeDistribution,
    /// Workload E.
    EGovernment,
}

impl SizeDist {
    /// The distribution of a built-in set name (`A`, `A-prepare`, ...).
    pub fn for_set(name: &str) -> Option<Self> {
        match name.chars().next()?.to_ascii_uppercase() {
            'A' => Some(SizeDist::HomeUser),
            'B' => Some(SizeDist::TravelingUser),
            'C' => Some(SizeDist::EmailBackup),
            'D' => Some(SizeDist::CodeDistribution),
            'E' => Some(SizeDist::EGovernment),
            _ => None,
        }
        .filter(|_| name.len() == 1 || name.as_bytes()[1] == b'-' || name.as_bytes()[1] == b'_')
    }

    /// Draws one size in bytes.
    pub fn draw(self, rng: &mut impl Rng) -> u64 {
        const KB: f64 = 1e3;
        const MB: f64 = 1e6;
        fn home(rng: &mut impl Rng) -> f64 {
            let x = if rng.gen_bool(0.6) {
                log_normal(rng, 2.0 * KB, 1.2)
            } else {
                log_normal(rng, 2.5 * MB, 0.7)
            };
            x.clamp(KB, 4e9)
        }
        let v = match self {
            SizeDist::HomeUser => home(rng),
            SizeDist::TravelingUser => loop {
                let x = home(rng);
                if x <= 4.0 * MB {
                    break x;
                }
            },
            SizeDist::EmailBackup => rng.gen_range(10.0 * MB..=25.0 * MB),
            SizeDist::CodeDistribution => log_normal(rng, 1.84 * KB, 2.5).clamp(10.0, 10.0 * MB),
            SizeDist::EGovernment => log_normal(rng, 110.0 * KB, 2.0).clamp(KB, 11.0 * MB),
        };
        v.round() as u64
    }
}

/// Where `filewrite` takes its files from.
#[derive(Clone, Debug)]
pub enum FileSet {
    /// Files of a local directory (sorted by name; object name = file name).
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Its files and their sizes.
        files: Vec<(String, u64)>,
    },
    /// A built-in synthetic set.
    Synthetic {
        /// Its name (`A-prepare`...).
        name: String,
        /// Its distribution.
        dist: SizeDist,
        /// The run's seed.
        seed: u64,
        /// Largest size produced (quick mode); sizes above are cut to it.
        max_size: u64,
    },
}

/// One file of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRef {
    /// The object name it is written under (without the container).
    pub name: String,
    /// Its size.
    pub size: u64,
}

impl FileSet {
    /// The set a `files=` value names.
    pub fn open(files: &str, seed: u64, max_size: u64) -> Result<Self, String> {
        let path = Path::new(files);
        if path.is_dir() {
            let mut v = Vec::new();
            let rd = std::fs::read_dir(path).map_err(|e| format!("{files}: {e}"))?;
            for ent in rd {
                let ent = ent.map_err(|e| format!("{files}: {e}"))?;
                let md = ent.metadata().map_err(|e| format!("{files}: {e}"))?;
                if md.is_file() {
                    v.push((ent.file_name().to_string_lossy().into_owned(), md.len()));
                }
            }
            if v.is_empty() {
                return Err(format!("{files}: no files"));
            }
            v.sort();
            return Ok(FileSet::Dir {
                dir: path.to_path_buf(),
                files: v,
            });
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dist = SizeDist::for_set(&name).ok_or_else(|| {
            format!(
                "files={files}: not a directory, and {name:?} is not a built-in file set \
                 (A..E, optionally suffixed, e.g. A-prepare)"
            )
        })?;
        Ok(FileSet::Synthetic {
            name,
            dist,
            seed,
            max_size,
        })
    }

    /// Files in the set (`None`: unbounded).
    pub fn len(&self) -> Option<u64> {
        match self {
            FileSet::Dir { files, .. } => Some(files.len() as u64),
            FileSet::Synthetic { .. } => None,
        }
    }

    /// File `i` (1-based; wraps around for directories).
    pub fn file(&self, i: u64, oprefix: &str) -> FileRef {
        match self {
            FileSet::Dir { files, .. } => {
                let (n, s) = &files[((i.max(1) - 1) % files.len() as u64) as usize];
                FileRef {
                    name: n.clone(),
                    size: *s,
                }
            }
            FileSet::Synthetic {
                name,
                dist,
                seed,
                max_size,
            } => FileRef {
                name: format!("{oprefix}{i}"),
                size: dist.draw(&mut rng_for(*seed, name, i)).min(*max_size),
            },
        }
    }

    /// The bytes of file `i`.
    pub fn read(&self, i: u64, oprefix: &str) -> std::io::Result<Bytes> {
        match self {
            FileSet::Dir { dir, .. } => {
                let f = self.file(i, oprefix);
                Ok(Bytes::from(std::fs::read(dir.join(&f.name))?))
            }
            FileSet::Synthetic { name, seed, .. } => {
                let f = self.file(i, oprefix);
                Ok(content(*seed, name, i, f.size))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(set: &str, n: u64) -> Vec<u64> {
        let fs = FileSet::open(set, 7, u64::MAX).unwrap();
        (1..=n).map(|i| fs.file(i, "o").size).collect()
    }

    #[test]
    fn synthetic_sets_are_reproducible_and_shaped() {
        assert_eq!(sizes("/nowhere/A", 50), sizes("A", 50));
        assert_ne!(sizes("A", 50), sizes("A-prepare", 50));
        let a = sizes("A", 2000);
        let below_4mb = a.iter().filter(|&&s| s < 4_000_000).count() as f64 / 2000.0;
        assert!(
            (0.85..0.95).contains(&below_4mb),
            "A: {below_4mb} below 4 MB"
        );
        assert!(a.iter().all(|&s| (1_000..=4_000_000_000).contains(&s)));
        assert!(sizes("B", 500).iter().all(|&s| s <= 4_000_000));
        assert!(sizes("C", 500)
            .iter()
            .all(|&s| (10_000_000..=25_000_000).contains(&s)));
        let mut d = sizes("D", 2001);
        d.sort();
        let median = d[1000] as f64;
        assert!((1_200.0..2_800.0).contains(&median), "D median {median}");
        let mut e = sizes("E", 2001);
        e.sort();
        assert!((70_000.0..170_000.0).contains(&(e[1000] as f64)));
        assert!(FileSet::open("/nowhere/X", 1, 1).is_err());
    }

    #[test]
    fn contents_match_sizes_and_directories_work() {
        let fs = FileSet::open("E", 3, 5_000).unwrap();
        let f = fs.file(4, "obj");
        assert_eq!(f.name, "obj4");
        let b = fs.read(4, "obj").unwrap();
        assert_eq!(b.len() as u64, f.size);
        assert_eq!(b, fs.read(4, "obj").unwrap());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.txt"), b"bb").unwrap();
        std::fs::write(dir.path().join("a.txt"), b"a").unwrap();
        let ds = FileSet::open(dir.path().to_str().unwrap(), 0, 0).unwrap();
        assert_eq!(ds.len(), Some(2));
        assert_eq!(ds.file(1, "x").name, "a.txt");
        assert_eq!(ds.file(3, "x").name, "a.txt");
        assert_eq!(&ds.read(2, "x").unwrap()[..], b"bb");
    }
}
