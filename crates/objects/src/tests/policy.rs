//! Bucket policies in the index: set, replaced, removed, kept by the owner's
//! bucket record only; the bucket a name addresses for another account.

use super::*;

#[tokio::test]
async fn policies_live_in_the_bucket_record_and_names_find_their_owner() {
    let l = layer(100);
    l.create_bucket("a", "bkt").await.unwrap();
    assert_eq!(l.head_bucket("a", "bkt").unwrap().policy, None);
    let accesses = l.engine().stats().accesses;
    l.set_bucket_policy("a", "bkt", Some("{\"Statement\":[]}".into()))
        .await
        .unwrap();
    assert_eq!(
        l.head_bucket("a", "bkt").unwrap().policy.as_deref(),
        Some("{\"Statement\":[]}")
    );
    // Another account has no bucket of that name to set a policy on.
    assert!(matches!(
        l.set_bucket_policy("b", "bkt", None).await,
        Err(ObjectError::NoSuchBucket(_))
    ));
    // The name addresses a's bucket for anyone; a name nobody has, nothing.
    let found = l.bucket_addressed("b", "bkt").unwrap().unwrap();
    assert_eq!((found.owner.as_str(), found.policy.is_some()), ("a", true));
    assert!(l.bucket_addressed("b", "none").unwrap().is_none());
    // Two Swift containers of one name: S3 cannot address either for a third account.
    let none = BTreeMap::new;
    l.create_container("c", "shared", none(), none())
        .await
        .unwrap();
    l.create_container("d", "shared", none(), none())
        .await
        .unwrap();
    assert!(l.bucket_addressed("b", "shared").unwrap().is_none());
    assert_eq!(
        l.bucket_addressed("c", "shared").unwrap().unwrap().owner,
        "c"
    );
    l.set_bucket_policy("a", "bkt", None).await.unwrap();
    assert_eq!(l.head_bucket("a", "bkt").unwrap().policy, None);
    // Only the index changed: the engine saw no access.
    assert_eq!(l.engine().stats().accesses, accesses);
}
