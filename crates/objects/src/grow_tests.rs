//! The free space after the engine grew ([`ObjectLayer::grow_to`]), over a
//! real Path ORAM on the memory store.

use super::*;

use oram_path::{PathConfig, PathOram, TreeConfig};
use oram_seal::{MasterKey, Sealer, VolumeId};
use oram_state::{MemKv, MemState};
use oram_store_memory::MemoryStore;

const BS: usize = 64;

fn put_body(len: usize) -> (ByteStream, PutOptions) {
    let body: ByteStream = Box::pin(futures::stream::iter([Ok(Bytes::from(vec![7u8; len]))]));
    let opts = PutOptions {
        expected_len: Some(len as u64),
        ..PutOptions::default()
    };
    (body, opts)
}

#[tokio::test]
async fn a_full_layer_takes_the_blocks_the_engine_grew_by() {
    let oram: Arc<dyn Oram> = Arc::new(
        PathOram::new(
            PathConfig {
                tree: TreeConfig {
                    capacity: 32,
                    block_size: BS,
                    cached_levels: 0,
                    ..PathConfig::default().tree
                },
                ..PathConfig::default()
            },
            Arc::new(MemoryStore::new()),
            Arc::new(Sealer::new(&MasterKey::generate(), VolumeId::random())),
            Box::new(MemState::new()),
        )
        .unwrap(),
    );
    let l = ObjectLayer::new(oram.clone(), Box::new(MemKv::new()), LayerConfig::default()).unwrap();
    l.create_bucket("alice", "bkt").await.unwrap();
    let (b, o) = put_body(30 * BS);
    l.put_object("alice", "bkt", "a", b, o).await.unwrap();
    let (b, o) = put_body(10 * BS);
    let full = l.put_object("alice", "bkt", "b", b, o).await;
    assert!(matches!(full, Err(ObjectError::Full { .. })), "{full:?}");
    // Refused beyond what the engine has.
    assert!(l.grow_to(128).is_err());
    oram.grow(128, &|_, _| {}).await.unwrap();
    // Until the layer is told, the engine's new blocks are not handed out.
    assert_eq!(l.usage().capacity_blocks, 32);
    l.grow_to(128).unwrap();
    assert_eq!(
        (l.usage().capacity_blocks, l.usage().free_blocks),
        (128, 98)
    );
    let (b, o) = put_body(90 * BS);
    l.put_object("alice", "bkt", "b", b, o).await.unwrap();
    let (_, s) = l.get_object("alice", "bkt", "b", None).unwrap();
    use futures::StreamExt;
    let got: Vec<Bytes> = s.map(|r| r.unwrap()).collect().await;
    assert_eq!(got.concat(), vec![7u8; 90 * BS]);
    // Growing to less changes nothing.
    l.grow_to(64).unwrap();
    assert_eq!(l.usage().capacity_blocks, 128);
}
