//! The cluster's messages between a front and a node (oram-node's `wire`):
//! the peer is authenticated by mutual TLS, but a damaged or hostile message
//! from a member must still be refused without a panic or an unbounded
//! allocation.

use bytes::Bytes;
use oram_engine::{CheckReport, Op, OramError, RoundId};
use oram_node::wire::{Envelope, Reply, Request, Response};

/// Block size of the fuzzed messages.
const BLOCK: usize = 16;

/// A front's request and a node's reply decoded from the same bytes.
pub fn cluster_wire(data: &[u8]) -> bool {
    let bytes = Bytes::copy_from_slice(data);
    let request = Envelope::decode(bytes.clone(), BLOCK).is_ok();
    let reply = Reply::decode(bytes, BLOCK).is_ok();
    request || reply
}

/// Seeds of [`cluster_wire`]: a stage of every op kind, a land, and replies
/// with answers, a check report and an error.
pub fn cluster_wire_seeds() -> Vec<Vec<u8>> {
    let block = Bytes::from(vec![7u8; BLOCK]);
    let stage = Envelope {
        partition: 3,
        request: Request::Stage {
            token: 5,
            round: RoundId {
                seq: 9,
                repeat: true,
            },
            attempt: 11,
            ops: vec![
                Op::Read(1),
                Op::Write(2, block.clone()),
                Op::Take(3),
                Op::Dummy,
                Op::Insert(4, block.clone()),
            ],
        },
    };
    let land = Envelope {
        partition: 0,
        request: Request::Land {
            token: 1,
            seq: 2,
            attempt: 3,
        },
    };
    let answers = Reply {
        token: 5,
        response: Response::Answers(vec![block, Bytes::new()]),
    };
    let checked = Reply {
        token: 5,
        response: Response::Checked(CheckReport {
            written_blocks: vec![1, 5],
            problems: vec!["partition 3: block 5".into()],
            problems_total: 1,
            ..CheckReport::default()
        }),
    };
    let failed = Reply {
        token: 0,
        response: Response::Failed(OramError::Integrity {
            key: "vol0/o/3/2/1".into(),
            reason: "tag".into(),
        }),
    };
    vec![
        stage.encode(BLOCK).to_vec(),
        land.encode(BLOCK).to_vec(),
        answers.encode(BLOCK).to_vec(),
        checked.encode(BLOCK).to_vec(),
        failed.encode(BLOCK).to_vec(),
    ]
}
