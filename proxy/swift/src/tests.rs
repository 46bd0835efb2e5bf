use super::*;

fn q(prefix: &str, delim: Option<&str>, marker: Option<&str>, end: Option<&str>, reverse: bool, limit: usize) -> ListQuery {
    ListQuery {
        limit,
        marker: marker.map(Into::into),
        end_marker: end.map(Into::into),
        prefix: prefix.into(),
        delimiter: delim.map(Into::into),
        reverse,
        path: false,
    }
}

fn names(e: &[Entry<()>]) -> Vec<&str> {
    e.iter().map(|e| e.name()).collect()
}

#[test]
fn account_listing_filters() {
    let items: Vec<(String, ())> = ["a", "b/1", "b/2", "c", "d"]
        .iter()
        .map(|s| (s.to_string(), ()))
        .collect();
    assert_eq!(names(&filter_names(items.clone(), &q("", None, None, None, false, 10))), ["a", "b/1", "b/2", "c", "d"]);
    assert_eq!(names(&filter_names(items.clone(), &q("", Some("/"), None, None, false, 10))), ["a", "b/", "c", "d"]);
    assert_eq!(names(&filter_names(items.clone(), &q("", None, Some("a"), Some("d"), false, 10))), ["b/1", "b/2", "c"]);
    assert_eq!(names(&filter_names(items.clone(), &q("", None, Some("d"), Some("a"), true, 2))), ["c", "b/2"]);
    assert_eq!(names(&filter_names(items.clone(), &q("b/", None, None, None, false, 1))), ["b/1"]);
}

#[test]
fn manifest_and_paths() {
    assert_eq!(split_object_path("/c/o/x"), Some(("c".into(), "o/x".into())));
    assert_eq!(split_object_path("c"), None);
    assert_eq!(split_object_path("c/"), None);
    assert_eq!(split_manifest("segs%20x/pre%2Ffix"), Some(("segs x".into(), "pre/fix".into())));
    assert_eq!(split_manifest("segs/"), Some(("segs".into(), String::new())));
}
