//! The label selectors of a queue's admission checks
//! (`lifecycle::selector_matches`): which units a check applies to.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::controller::records::Labels;
use crate::controller::state::release_write::selector_matches;

#[test]
fn label_selectors() {
    let map: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
    let labels = Labels::from_map(&map);
    assert!(selector_matches(None, &labels));
    let sel = |match_labels: Option<BTreeMap<String, String>>,
               exprs: Vec<(&str, &str, Vec<&str>)>| LabelSelector {
        match_labels,
        match_expressions: Some(
            exprs
                .into_iter()
                .map(|(k, op, vs)| LabelSelectorRequirement {
                    key: k.into(),
                    operator: op.into(),
                    values: Some(vs.into_iter().map(String::from).collect()),
                })
                .collect(),
        ),
    };
    assert!(selector_matches(
        Some(&sel(Some(map.clone()), vec![])),
        &labels
    ));
    assert!(!selector_matches(
        Some(&sel(Some([("team".into(), "b".into())].into()), vec![])),
        &labels
    ));
    assert!(selector_matches(
        Some(&sel(None, vec![("team", "In", vec!["a", "c"])])),
        &labels
    ));
    assert!(!selector_matches(
        Some(&sel(None, vec![("team", "NotIn", vec!["a"])])),
        &labels
    ));
    assert!(selector_matches(
        Some(&sel(None, vec![("gpu", "DoesNotExist", vec![])])),
        &labels
    ));
    assert!(!selector_matches(
        Some(&sel(None, vec![("gpu", "Exists", vec![])])),
        &labels
    ));
}
