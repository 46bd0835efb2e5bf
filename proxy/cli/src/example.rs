//! `oram-proxy example-config`: every field of the configuration file with its
//! default, documented. The `[engine]` part comes from the engine registry and
//! the engine crates.

/// A documented configuration with every field at its default: what
/// `oram-proxy example-config` prints. The `[engine]` part comes from the engine
/// crates.
pub fn example() -> String {
    format!(
        "{EXAMPLE_HEAD}{}\n{EXAMPLE_TAIL}\n{}",
        oram_volume::engines::example(),
        oram_volume::cluster::example()
    )
}

const EXAMPLE_HEAD: &str = r#"# oram-proxy configuration. Every field is optional; the values shown are the defaults.

# Directory holding the master key, the credentials, the volume parameters and,
# with the fs back-end, the sealed ORAM objects.
data_dir = "./oram-data"

[s3]
# Address the S3 API listens on.
listen = "127.0.0.1:8480"
# Region reported to clients (GetBucketLocation, HeadBucket).
region = "us-east-1"
# Requests served at once; more get 503 SlowDown (clients retry).
max_concurrent_requests = 64
# Days after which an unfinished multipart upload is aborted and its parts'
# space freed, in buckets without a lifecycle rule (AbortIncompleteMultipartUpload)
# of their own. 0: never.
abort_incomplete_uploads_after_days = 7
# Virtual-hosted-style addressing: with a domain, a request for host
# <bucket>.<domain> (any port) addresses that bucket, as SDKs and s3cmd do by
# default; point *.<domain> at the proxy in DNS. Path-style requests, and
# requests to any other host name or an IP address, work either way.
# Empty: path-style only.
domain = ""

[metrics]
# Address of the operator endpoint: GET /metrics (Prometheus text: client requests
# by operation and status, latencies, backend requests, bytes and errors, engine,
# checkpoint, journal, lease and TLS gauges), GET /health and the dashboard
# (/dashboard). Empty: off. /metrics and the dashboard's data need a bearer token
# (on loopback too); on a non-loopback address it speaks HTTPS when [tls] is
# configured.
listen = ""
# File holding the bearer token for /metrics and the dashboard's data (mode 0600).
# Unset: <data_dir>/metrics.token, generated at the first start.
# token_file = "/etc/oram-proxy/metrics.token"
# Serve the dashboard (/dashboard): live backend requests beside client requests.
dashboard = true
# Show object names on the dashboard instead of keyed digests.
dashboard_object_names = false
[swift]
# Address the OpenStack Swift API listens on; "" (the default) leaves it off
# (--swift-listen). Auth v1 at http://<listen>/auth/v1.0 with
# X-Auth-User: <access_key>:<access_key> and X-Auth-Key: <secret_key>.
listen = ""
# Lifetime of a Swift auth token, seconds.
token_ttl_secs = 86400
# Requests served at once; more get 503 (clients retry).
max_concurrent_requests = 64
# Further Swift users in the accounts of the S3 users (tempauth's users): without
# admin they reach only containers whose X-Container-Read/-Write ACLs name them
# (<account>:<user>) or their account. The file then holds secrets (mode 0600).
# [[swift.users]]
# account = "<an access key above>"
# user = "reader"
# key = "<8+ characters>"
# admin = false

[log]
# One line per client request (S3 and Swift) at info level under the log target
# oram_proxy::access (--access-log): time, client address, user (access key or
# Swift account:user), method, path without the query string, status, bytes in
# and out, duration, request id. Never a secret key, signature, token or the
# query of a presigned URL. RUST_LOG chooses what is logged and where the target
# goes, e.g. RUST_LOG=info,oram_proxy::access=off.
access = false

[limits]
# Connections served at once per listener (S3, Swift); more wait in the backlog.
max_connections = 1024
# Connections one client address (IPv6: one /64) may hold at once; beyond: 503.
max_connections_per_client = 256
# Seconds a client has to send its request headers; also how long an idle
# keep-alive connection stays open.
header_timeout_secs = 30
# Seconds a request body may stall (no byte arriving) before the request fails.
body_timeout_secs = 60
# Seconds a response may stall (the client reading nothing) before the
# connection is closed.
send_timeout_secs = 60
# Bytes a second a client must read a response at (measured over windows of
# send_timeout_secs while the socket is full); slower, the connection is closed,
# so a client trickling a download cannot hold a request slot. 0: only a full
# stall closes it.
min_send_rate = 1024
[tls]
# PEM certificate chain (server certificate first) and private key (mode 0600) of
# the S3 and Swift listeners, which then speak HTTPS only. Both unset: the pair
# `oram-proxy init --tls-self-signed` wrote to <data_dir>/tls/ if present, else
# plain HTTP. SIGHUP reloads the files without dropping connections.
# cert_file = "/etc/oram-proxy/tls/cert.pem"
# key_file = "/etc/oram-proxy/tls/key.pem"
# Plain HTTP on a non-loopback address is refused unless this is true
# (--allow-plain-http); it then logs a warning at every start.
allow_plain_http = false

"#;

const EXAMPLE_TAIL: &str = r#"[volume]
# Automatic growth (path, ring and direct engines): when this fraction of the capacity is
# used, a serving proxy doubles the volume, online, up to max_size. 0: never by
# itself (`oram-proxy grow --to SIZE` grows it by hand). [engine] capacity_blocks
# is the starting size.
grow_at = 0.0
# The largest size automatic growth goes to, e.g. "16GiB" (required with grow_at).
max_size = ""

[backend]
# "fs" (a local directory) or "s3" (AWS S3, IBM Cloud Object Storage, MinIO, ...).
# On the command line: --backend file:///path or --backend s3://bucket/prefix.
kind = "fs"
# Key prefix of this volume's objects (inside the directory or bucket prefix).
prefix = "vol0"
# fs: directory of the store; default "<data_dir>/store".
# path = "/var/lib/oram-proxy/store"
# fs: fsync every write (turn off only for throw-away benchmarks).
fsync = true
# s3: the bucket holding the volume (create it with `oram-proxy init`).
bucket = ""
# s3: key prefix inside the bucket ("" for none).
key_prefix = ""
# s3: endpoint URL; unset for AWS S3 itself (--backend-endpoint).
# endpoint = "http://127.0.0.1:9000"
# s3: region (--backend-region); IBM COS: the endpoint's region, e.g. "eu-de".
region = "us-east-1"
# s3: path-style addressing (endpoint/bucket/key); MinIO and most custom endpoints
# need it. Default: on when an endpoint is set.
# path_style = true
# s3: static credentials; unset: the standard AWS chain (AWS_ACCESS_KEY_ID /
# AWS_SECRET_ACCESS_KEY, profiles, instance metadata).
# access_key = ""
# secret_key = ""
# s3: requests in flight towards the backend.
max_in_flight = 32
# s3: timeout of one request attempt, seconds; a PUT's attempt gets one second
# more per 128 KiB of its body (a large checkpoint over a slow link).
attempt_timeout_secs = 30
# s3: attempts per request (exponential back-off with jitter in between).
max_attempts = 4
# s3: send If-Match / If-None-Match: * with every PUT, so that a PUT that timed
# out but lands later cannot replace a newer version (AWS S3 and MinIO support
# it; turn off only for a service that rejects conditional writes).
conditional_writes = true
# Seconds of the backend lease (<prefix>/meta/lease): one proxy at a time may
# write a volume; it renews the lease every quarter of this and stops writing when
# it cannot. A second proxy waits this long for a silent holder before taking
# over. A write in flight (its retries included) is abandoned when the lease
# lapses. 0: no lease (only for a service without conditional writes).
lease_secs = 30
# GiB the backend may hold for this volume (a bucket budget or quota); 0 = none.
# The engine's objects grow towards a bound several times the capacity (see
# `oram-proxy describe` and the README's footprint table); the metric
# oram_backend_budget_bytes and the alert OramProxyBackendBudgetTooSmall warn
# when that bound exceeds the budget. Nothing is refused because of it.
budget_gib = 0

[state]
# The trusted state (position map, stash, object index...) lives in
# <data_dir>/state.redb, committed with fsync before every acknowledgement. It is
# also checkpointed to the backend, sealed and padded to a fixed size, so that
# `oram-proxy recover` can rebuild a lost data directory: every this many seconds
# and at shutdown (0 = at shutdown only). A checkpoint pauses the engine while it
# uploads.
checkpoint_interval_secs = 300
# Also a checkpoint as soon as the backend objects the engine superseded since the
# last one (the checkpoint's own and earlier versions of rewritten buckets) may
# exceed this percentage of its positions: once it lands they are deleted. Bounds
# the backend's footprint (Path ORAM: 2.5x the capacity at 25) at the price of
# more checkpoints on a busy volume; 0 = on the interval only.
superseded_max_percent = 25
# Bytes of object index a checkpoint has room for; 0 = 64 per block of capacity.
# A larger index doubles the checkpoint (its size then hints at the index size).
checkpoint_index_bytes = 0
# MiB of memory the state database keeps as its page cache (pages beyond it are
# read from state.redb again, usually from the kernel's page cache).
cache_mib = 256
# The shipped log: a recovery point of zero. With log_interval_ms > 0 every commit
# of the state is also carried to the backend, sealed, in records of
# log_record_kib each, one every log_interval_ms whatever the clients do (idle
# too: that is what keeps the records' pattern independent of the requests), and
# a request is answered only once its record has landed. `recover` then replays
# the log after the last checkpoint and loses nothing acknowledged. It costs
# latency (up to one interval plus a PUT per commit), a throughput cap (the state
# changes of a round must fit log_record_kib / log_interval_ms) and constant
# upload traffic. 0 = no log.
log_interval_ms = 0
# Unset: 1024 on a volume or a cluster's front, 64 on a cluster node (a node's
# records carry only its partitions' positions and layouts).
# log_record_kib = 1024

[key]
# The master key: ORAM_PROXY_MASTER_KEY (64 hex digits) if set; else a passphrase
# (ORAM_PROXY_PASSPHRASE, or this file, mode 0600) stretched with Argon2id; else
# the key file (mode 0600), created on first start.
# passphrase_file = "/etc/oram-proxy/passphrase"
# key_file = "<data_dir>/master.key"

# Users of the S3 API, served with ORAM_PROXY_ROOT_USER / ORAM_PROXY_ROOT_PASSWORD
# (the first user) and those of <data_dir>/credentials.toml (where a user is
# generated on a first start without any other, and where `oram-proxy user`
# adds, rotates and removes users while serving). Users defined here are changed
# here (and a restart).
# [[users]]
# access_key = "alice"
# secret_key = "a-long-random-secret"
"#;
