//! Fuzzing of every decoder of bytes that come from the backend or from disk, and
//! of the S3 and Swift request handling, on stable Rust.
//!
//! * [`targets`]: the targets, plain functions `fn(&[u8]) -> bool` (libFuzzer's
//!   signature plus "was the input accepted", so that `cargo fuzz` could wrap
//!   them), each with seeds: valid encodings produced by the real encoders.
//! * [`driver`]: a seeded mutation fuzzer ([`mutate`]) that runs a target for a
//!   bounded number of executions and time, catches panics (on any thread) and
//!   fails an input whose single allocation or live-byte growth exceeds a limit,
//!   writing it as hex under the target directory.
//! * [`alloc`]: the counting global allocator that measures it. It is the only
//!   code of the workspace that uses `unsafe` (`GlobalAlloc` is an unsafe trait):
//!   this crate denies `unsafe_code` instead of forbidding it, and only that
//!   module allows it, with a `SAFETY:` justification.
//!
//! `tests/fuzz.rs` runs every target in CI for a bounded time and count
//! (`ORAM_FUZZ_SECONDS` per target, default 7; `ORAM_FUZZ_ITERS`, default 150 000);
//! the `oram-fuzz` binary runs longer (`oram-fuzz --seconds 120 [target...]`).
//!
//! # Decoders and the target covering each
//!
//! | decoder (crate) | bytes from | target |
//! |---|---|---|
//! | `Sealer::open` (oram-seal): format, session, nonce, AES-GCM | backend: every sealed bucket, slot, block, checkpoint | `seal_open`, `checkpoint` |
//! | `decode_node`, `decode_bucket`, `decode_pending` (oram-state) | `state.redb`, checkpoint | `state_values`, `state_rows`, `snapshot` |
//! | `SpaceState::from_rows` with `decode_u64`, `decode_intent_key` (oram-state) | `state.redb`, checkpoint | `state_rows`, `snapshot` |
//! | `Intent::decode` (oram-tree) | `state.redb`, checkpoint (intent records) | `intent` |
//! | `decode_groups` (oram-statedb) | shipped log records, after they open | `log_groups` |
//! | `bucket::decode_bucket` (oram-path) | backend bucket plaintext | `path_bucket` |
//! | `Meta::decode`, `decode_header`, `decode_slot` (oram-ring) | backend header/slot plaintext; slot maps in `state.redb` | `ring_layout` |
//! | `Db::restore` / `parse_snapshot`, `Db::state`, `Db::kv`, `Db::meta` (oram-statedb) | checkpoint plaintext | `snapshot` |
//! | `header::parse_prefix`, `header::open_checkpoint` (oram-volume) | backend `meta/checkpoint` | `checkpoint` |
//! | `VolumeParams::from_toml`, `adopt_into`, `Kdf::check_bounds`, `volume_id`, `header_is_authentic` (oram-volume) | backend `meta/volume` (read by `recover` before the key is known) | `volume_header` |
//! | `lease::inspect` (the lease record's TOML and what a start computes from it) (oram-volume) | backend `meta/lease` | `lease` |
//! | `records::decode` of object, bucket, upload and account records; `ObjectLayer::new`'s allocation check; listing, head, read (oram-objects) | `state.redb`, checkpoint (the index) | `index` |
//! | hyper's HTTP/1.1 parser; the Swift router, `parse_query`, `percent_decode`, `parse_range`, `parse_http_date`, ACLs, bulk delete, SLO manifests, DLO, COPY (oram-swift) | clients | `swift` |
//! | the server's `guard::s3_refusal` (oram-server); s3s (SigV4 header and presigned, SigV2, XML bodies, aws-chunked); `S3Front`'s legacy-region re-signing, range, copy-source, MD5 and token parsing (oram-s3) | clients | `s3` |
//! | `guard::s3_refusal`'s query decoding (oram-server), checked against an independent decoder: any SigV2 name or long/repeated `X-Amz-Expires` however encoded is refused | clients | `guard` |
//! | `Envelope::decode`, `Reply::decode` (oram-node) | a cluster member over mutual TLS (front ↔ node) | `cluster_wire` |
//! | SLO manifests (oram-swift): nesting, ranges, the per-request segment and manifest-byte budgets, `multipart-manifest=get|delete`, overflowing sizes | clients | `slo` |
//!
//! Not covered: the TOML configuration file and the key file (the operator's, not
//! the provider's), redb's own file format (a `state.redb` is trusted local
//! state: only its values are decoded here), the S3 back-end's HTTP responses
//! (parsed by aws-sdk-s3) and the fs back-end's files (opaque bytes to it).

pub mod alloc;
pub mod driver;
pub mod mutate;
pub mod targets;
