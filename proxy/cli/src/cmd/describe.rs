//! `oram-proxy describe [--json]`: the engine's model at the configuration, as
//! `serve` would run it — what the workload runner and the speed benchmark read
//! instead of computing an engine's numbers themselves.

use crate::args::DescribeArgs;
use crate::error::CliError;

/// `oram-proxy describe`.
pub fn run(args: DescribeArgs) -> Result<(), CliError> {
    let (cfg, _) = args.volume.configure()?;
    cfg.engine.validate()?;
    let m = cfg.engine.model(&cfg.backend.prefix);
    if args.json {
        let text = serde_json::to_string_pretty(&m).map_err(|e| e.to_string())?;
        crate::util::out(&format!("{text}\n"));
    } else {
        crate::util::out(&format!(
            "engine {} ({}), {} blocks of {} bytes\nbackend bytes per client byte: {:.2} \
             ({:.1} blocks per block accessed; {})\nobjects of {} bytes; trusted state at most \
             {} bytes, tree-top cache {} bytes; {} ops per round\nbackend requests per op: {:.1} \
             alone, {:.1} in a full round\nbackend at rest: at most {} bytes ({:.1}x the \
             capacity; every position in all its slots)\n",
            m.kind,
            if m.oblivious {
                "oblivious"
            } else {
                "not oblivious"
            },
            m.capacity,
            m.block_size,
            m.overhead,
            m.overhead_blocks(),
            m.assumes,
            m.object_bytes,
            m.state_bound,
            m.cache_bytes,
            m.ops_per_round,
            m.read_op.requests.max(m.write_op.requests),
            m.round_requests_per_op,
            m.backend_bytes_bound(),
            m.backend_bytes_bound() as f64 / m.oram_bytes().max(1) as f64
        ));
    }
    Ok(())
}
