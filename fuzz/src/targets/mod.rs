//! The fuzz targets (see the crate documentation for what each covers) and their
//! registry, [`ALL`].

pub mod cluster;
pub mod codecs;
pub mod guard;
pub mod http;
pub mod meta;

use crate::driver::{none, Target};

/// This thread's single-threaded runtime (the targets that run async code block
/// on it; one thread keeps the allocation measurement to the input).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    thread_local! {
        static RT: &'static tokio::runtime::Runtime = Box::leak(Box::new(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
        ));
    }
    RT.with(|rt| *rt)
}

/// Every target, cheapest first.
pub const ALL: &[Target] = &[
    Target {
        name: "guard",
        run: guard::guard,
        seeds: guard::guard_seeds,
        extra: guard::guard_extra,
    },
    Target {
        name: "cluster_wire",
        run: cluster::cluster_wire,
        seeds: cluster::cluster_wire_seeds,
        extra: none,
    },
    Target {
        name: "log_groups",
        run: codecs::log_groups,
        seeds: codecs::log_groups_seeds,
        extra: none,
    },
    Target {
        name: "intent",
        run: codecs::intent,
        seeds: codecs::intent_seeds,
        extra: none,
    },
    Target {
        name: "state_values",
        run: codecs::state_values,
        seeds: codecs::state_values_seeds,
        extra: none,
    },
    Target {
        name: "state_rows",
        run: codecs::state_rows,
        seeds: codecs::state_rows_seeds,
        extra: none,
    },
    Target {
        name: "path_bucket",
        run: codecs::path_bucket,
        seeds: codecs::path_bucket_seeds,
        extra: none,
    },
    Target {
        name: "ring_layout",
        run: codecs::ring_layout_target,
        seeds: codecs::ring_layout_seeds,
        extra: none,
    },
    Target {
        name: "seal_open",
        run: codecs::seal_open,
        seeds: codecs::seal_open_seeds,
        extra: none,
    },
    Target {
        name: "checkpoint",
        run: meta::checkpoint,
        seeds: meta::checkpoint_seeds,
        extra: none,
    },
    Target {
        name: "volume_header",
        run: meta::volume_header,
        seeds: meta::volume_header_seeds,
        extra: meta::volume_header_extra,
    },
    Target {
        name: "lease",
        run: meta::lease,
        seeds: meta::lease_seeds,
        extra: none,
    },
    Target {
        name: "index",
        run: meta::index,
        seeds: meta::index_seeds,
        extra: none,
    },
    Target {
        name: "snapshot",
        run: meta::snapshot,
        seeds: meta::snapshot_seeds,
        extra: none,
    },
    Target {
        name: "swift",
        run: http::swift,
        seeds: http::swift_seeds,
        extra: http::swift_extra,
    },
    Target {
        name: "slo",
        run: http::swift,
        seeds: guard::slo_seeds,
        extra: guard::slo_extra,
    },
    Target {
        name: "s3",
        run: http::s3,
        seeds: http::s3_seeds,
        extra: http::s3_extra,
    },
];

/// The target called `name`.
pub fn by_name(name: &str) -> Option<&'static Target> {
    ALL.iter().find(|t| t.name == name)
}
