//! The small trait a tree ORAM implements to run on [`crate::TreeEngine`]: its
//! bucket format and the scheme-specific steps of a round (plan, open and check,
//! apply and evict), all synchronous. The engine does every I/O, the intent
//! record, versions, the commit, the backend writes, locking and
//! statistics.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use oram_blockstore::ObjKey;
use oram_engine::{open_error, CheckReport, Op, OramError, Result, Stat};
use oram_seal::{ObjectIdentity, ObjectKind, Sealer};
use oram_state::{NodeVersion, Space, TrustedState};
use rand_chacha::ChaCha20Rng;

use crate::{Draws, Geometry, RoundRandom};

/// What every tree engine is configured with besides its scheme's own
/// parameters.
#[derive(Clone, Debug)]
pub struct TreeParams {
    /// Logical blocks the tree has room for.
    pub capacity: u64,
    /// Block ids are `0..id_limit` (≥ capacity: a partition of a larger id space).
    pub id_limit: u64,
    /// Bytes per block.
    pub block_size: usize,
    /// Most ops in one round; longer batches are split into several rounds.
    pub max_batch: usize,
    /// Accepted for compatibility; unused: a round's buckets are written before
    /// its commit, so one round's are in memory at a time.
    pub max_inflight_writebacks: usize,
    /// Attempts of one round's bucket writes before the round fails (it is
    /// finished again, as the same access, by the next round).
    pub writeback_attempts: u32,
    /// Attempts of a round within one access (see `TreeConfig::round_attempts`).
    pub round_attempts: u32,
    /// Largest stash allowed after a round.
    pub stash_bound: usize,
    /// Most superseded objects' keys one round deletes (`TreeConfig::collect_batch`).
    pub collect_batch: usize,
    /// Backend key prefix (a valid key).
    pub prefix: String,
    /// Key shards (`TreeConfig::key_shards`); 0 or 1: none.
    pub key_shards: u32,
    /// Seed for the random choices; `None` (production) seeds from the OS.
    pub rng_seed: Option<[u8; 32]>,
}

/// The whole objects and the byte ranges a round reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    /// Nodes whose whole object is fetched (one `get_many`).
    pub whole: Vec<u64>,
    /// `(node, part)`: ranged reads of one part of a node's object
    /// ([`TreeScheme::part_range`]), all sent concurrently with the whole reads.
    pub parts: Vec<(u64, usize)>,
}

/// The most key shards a tree may have (`TreeConfig::key_shards`).
pub const MAX_KEY_SHARDS: u32 = 256;

/// Naming and sealing of one engine's objects: the key layout
/// `<prefix>/<dir>/[<shard>/]<node>[.<slot>]` and identities in the state's
/// space.
#[derive(Clone)]
pub struct Sealing {
    sealer: Arc<Sealer>,
    space: Space,
    kind: ObjectKind,
    /// `<prefix>/<dir>/`.
    base: String,
    /// Key shards; 0 or 1: no shard segment.
    shards: u32,
}

impl Sealing {
    pub(crate) fn new(
        sealer: Arc<Sealer>,
        space: Space,
        kind: ObjectKind,
        prefix: &str,
        dir: &str,
        shards: u32,
    ) -> Result<Self> {
        let base = format!("{prefix}/{dir}/");
        // The longest key this layout makes: a prefix that leaves no room for
        // it is refused here, not found by a key that fails later.
        ObjKey::new(format!("{base}ff/{}.255", u64::MAX))
            .map_err(|e| OramError::Config(format!("prefix: {e}")))?;
        crate::check_key_shards(shards).map_err(OramError::Config)?;
        Ok(Self {
            sealer,
            space,
            kind,
            base,
            shards,
        })
    }

    /// The backend key prefix of every bucket (`<prefix>/<dir>/`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The backend key of bucket `node` in `slot`: a function of the two alone
    /// (the shard is `node`'s), so the server learns nothing from it it does
    /// not learn from the bucket's number.
    pub fn key(&self, node: u64, slot: u8) -> ObjKey {
        let mut key = self.base.clone();
        if self.shards > 1 {
            let _ = write!(key, "{:x}/", node % u64::from(self.shards));
        }
        let _ = write!(key, "{node}");
        if slot != 0 {
            let _ = write!(key, ".{slot}");
        }
        ObjKey::new(key).expect("prefix validated")
    }

    /// The identity of `position` (a node, or a part of one) written at `nv`.
    pub fn identity(&self, position: u64, nv: &NodeVersion) -> ObjectIdentity {
        ObjectIdentity {
            kind: self.kind,
            space: self.space.0,
            position,
            version: nv.version,
            generation: nv.generation,
        }
    }

    /// Seals `plain` as `position` at `nv`.
    pub fn seal(&self, position: u64, nv: &NodeVersion, plain: &[u8]) -> Result<Bytes> {
        self.sealer
            .seal(&self.identity(position, nv), plain)
            .map_err(OramError::Seal)
    }

    /// Opens `sealed`, which must be `position` at `nv`, read from bucket `node`'s
    /// current object (named in errors).
    pub fn open(&self, node: u64, position: u64, nv: &NodeVersion, sealed: &[u8]) -> Result<Bytes> {
        self.sealer
            .open(&self.identity(position, nv), sealed)
            .map(Bytes::from)
            .map_err(|e| open_error(self.key(node, nv.slot).as_str(), e))
    }

    /// An integrity error about bucket `node` at `nv`.
    pub fn integrity(&self, node: u64, nv: &NodeVersion, reason: impl Into<String>) -> OramError {
        OramError::Integrity {
            key: self.key(node, nv.slot).to_string(),
            reason: reason.into(),
        }
    }

    /// The sealed object fetched for a bucket at `nv`: `Ok(None)` for a bucket
    /// never written (absent, as expected), the object if present, an integrity
    /// error if presence and the version disagree.
    pub fn expect_object(
        &self,
        node: u64,
        nv: &NodeVersion,
        obj: Option<Bytes>,
    ) -> Result<Option<Bytes>> {
        match (nv.version, obj) {
            (0, None) => Ok(None),
            (0, Some(_)) => {
                Err(self.integrity(node, nv, "object present at a never-written bucket"))
            }
            (v, None) => Err(self.integrity(node, nv, format!("bucket version {v} missing"))),
            (_, Some(o)) => Ok(Some(o)),
        }
    }
}

/// What a plan may look at: the trusted state (read only) and the draws.
pub struct PlanCx<'a, 'r> {
    /// The engine's trusted state as the round found it.
    pub state: &'a dyn TrustedState,
    /// The round's random choices (fresh or replayed).
    pub draws: &'a mut Draws<'r>,
}

/// What the open step is given: the state (read only), the fetched objects in
/// the order of the plan's [`Requests`], and the plaintexts of buckets still in
/// flight — journaled by an earlier version and not yet resent — which replace
/// what the backend answered for them.
pub struct OpenCx<'a> {
    /// The trusted state as the round found it.
    pub state: &'a dyn TrustedState,
    /// Naming and sealing.
    pub sealing: &'a Sealing,
    /// Answers to [`Requests::whole`], in order.
    pub whole: Vec<Option<Bytes>>,
    /// Answers to [`Requests::parts`], in order.
    pub parts: Vec<Option<Bytes>>,
    /// Plaintexts of requested buckets whose write-back is still in flight.
    pub in_flight: &'a HashMap<u64, Bytes>,
}

/// What the apply step may change: the state, and the randomness it may use
/// (bucket permutations, the leaves of inserted blocks).
///
/// That randomness is the round's own ([`RoundRandom`], from the seed in its
/// intent record), never the engine's CSPRNG: a round reading ahead plans on
/// this round's applied state before it commits — and so reveals, in the slots
/// it reads, what this round drew — and if this round fails it is applied again
/// from its record, which must give the same layouts for the round ahead to be
/// repeated request for request. Laying a bucket out again as the failed
/// attempt did shows the server nothing new: a layout shows only in which of
/// the bucket's slots later rounds read, and the repetition reads the same ones.
pub struct ApplyCx<'a> {
    /// The trusted state.
    pub state: &'a mut dyn TrustedState,
    /// The round's randomness: the same on every attempt of the round.
    pub random: RoundRandom,
}

/// The result of the apply step.
pub struct Applied<N> {
    /// One answer per op.
    pub answers: Vec<Bytes>,
    /// The backend buckets rewritten: `(node, plaintext)`. The engine gives each a
    /// new version in a slot nothing durable refers to and writes it to the
    /// backend before the round's commit.
    pub writes: Vec<(u64, Bytes)>,
    /// Scheme statistics of the round, counted once it is durable.
    pub note: N,
}

/// A tree ORAM scheme: the bucket format and the round's scheme-specific steps.
pub trait TreeScheme: Send + Sync + Sized + 'static {
    /// The scheme's configuration.
    type Config: Clone + Send + Sync + 'static;
    /// A round's plan: what it reads and what it will do.
    type Plan: Send + 'static;
    /// What the open step found.
    type Opened: Send + 'static;
    /// Statistics of a round.
    type Note: Send + 'static;
    /// What a check copies out of the state before it reads the backend.
    type CheckCx: Send + Sync + 'static;

    /// The engine's name.
    const NAME: &'static str;
    /// Directory of the bucket objects under the prefix (`n`, `r`, ...).
    const DIR: &'static str;
    /// The kind of the sealed objects.
    const KIND: ObjectKind;

    /// Validates `cfg` and builds the scheme and the generic parameters.
    fn new(cfg: &Self::Config) -> Result<(Self, TreeParams)>;
    /// The tree.
    fn geometry(&self) -> &Geometry;
    /// Levels kept in the trusted state instead of the backend.
    fn cached_levels(&self) -> u32;
    /// The same scheme over `geo` — its tree with levels added below the
    /// leaves ([`Geometry::deeper`]) — taking block ids below `id_limit`;
    /// everything else (the bucket format, the cached levels, statistics so
    /// far) unchanged. A bucket's object must not depend on the tree's depth:
    /// the growth seals the new levels' buckets with it. The default refuses.
    fn grown(&self, geo: Geometry, id_limit: u64) -> Result<Self> {
        let _ = (geo, id_limit);
        Err(OramError::Unsupported("growing this tree scheme"))
    }
    /// The size in bytes of every bucket's backend object: whole-object reads
    /// are bounded to exactly this ([`oram_blockstore::SizeBound::Exact`]), so a
    /// back-end never buffers more and a truncated or extended object is refused
    /// by the read itself.
    fn object_len(&self) -> u64;

    /// Seals a bucket's plaintext into its backend object (by default as one
    /// sealed object at position `node`).
    fn seal_bucket(
        &self,
        s: &Sealing,
        node: u64,
        nv: &NodeVersion,
        plain: &Bytes,
    ) -> Result<Bytes> {
        s.seal(node, nv, plain)
    }
    /// The byte range of part `part` of a bucket object (ranged reads).
    fn part_range(&self, part: usize) -> Range<u64> {
        let _ = part;
        0..0
    }
    /// The plaintext of a bucket never written, for `format`; may set the
    /// bucket's metadata in `state`.
    fn empty_bucket(&self, state: &mut dyn TrustedState, node: u64, rng: &mut ChaCha20Rng)
        -> Bytes;

    /// Step 1: plans a round for ops on `blocks` (`None`: a dummy): every random choice
    /// through `cx.draws`, so that the same state, blocks and draws give the same
    /// plan. Changes nothing.
    fn plan(&self, cx: &mut PlanCx<'_, '_>, blocks: &[Option<u64>]) -> Result<Self::Plan>;
    /// Step 2: the objects and ranges the plan reads.
    fn requests(&self, plan: &Self::Plan) -> Requests;
    /// Step 3: opens and checks everything fetched; an error here (integrity, a block
    /// not where the state says) changes nothing.
    fn open(&self, cx: OpenCx<'_>, plan: &Self::Plan) -> Result<Self::Opened>;
    /// Step 4: serves `ops`, evicts, and returns the answers and the buckets to write.
    fn apply(
        &self,
        cx: ApplyCx<'_>,
        plan: Self::Plan,
        opened: Self::Opened,
        ops: Vec<Op>,
    ) -> Result<Applied<Self::Note>>;
    /// Counts a round's statistics once it is durable.
    fn committed(&self, note: Self::Note) {
        let _ = note;
    }
    /// The scheme's own statistics.
    fn stats(&self) -> Vec<Stat> {
        Vec::new()
    }

    /// Copies what a check needs out of the state.
    fn check_prepare(&self, state: &dyn TrustedState) -> Self::CheckCx;
    /// Checks the object fetched for bucket `node` at `nv` (present or not):
    /// returns the blocks it holds (none if it is absent and was never written),
    /// noting scheme-specific problems in `rep`; an error marks the object bad.
    fn check_bucket(
        &self,
        s: &Sealing,
        cx: &Self::CheckCx,
        node: u64,
        nv: &NodeVersion,
        obj: Option<Bytes>,
        rep: &mut CheckReport,
    ) -> Result<Vec<(u64, Bytes)>>;
}
