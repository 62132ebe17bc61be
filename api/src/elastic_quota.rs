//! Typed client view of Koordinator's `ElasticQuota`
//! (`scheduling.sigs.k8s.io/v1alpha1`). Koord-Queue only reads it; the schema
//! generated from it is installed only on clusters without Koordinator.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::keys;
use crate::queue_unit::ResourceList;

/// Guaranteed and maximum resources of the quota.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.sigs.k8s.io",
    version = "v1alpha1",
    kind = "ElasticQuota",
    doc = "ElasticQuota (Koordinator) is a node of the quota tree: guaranteed `min` and ceiling `max` of resources. The parent is named by the label `quota.scheduling.koordinator.sh/parent` (absent: the root `koordinator-root-quota`); an inner node carries `quota.scheduling.koordinator.sh/is-parent: \"true\"` and no job maps to it.",
    namespaced,
    status = "ElasticQuotaStatus",
    shortname = "eq",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ElasticQuotaSpec {
    /// Guaranteed resources: units within `min` are released even when others borrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<ResourceList>,
    /// Ceiling of resources in use by the quota's subtree; a resource not named
    /// here is unlimited at this level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<ResourceList>,
}

/// Usage as observed by the quota's owner.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElasticQuotaStatus {
    /// Resources in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<ResourceList>,
}

impl ElasticQuota {
    /// Name of the parent quota (the root quota when the label is absent).
    pub fn parent_name(&self) -> &str {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::QUOTA_PARENT_LABEL))
            .map(String::as_str)
            .filter(|p| !p.is_empty())
            .unwrap_or(keys::ROOT_QUOTA_NAME)
    }

    /// Whether this quota's children share fairly (its annotation
    /// `koord-queue/fair-sharing: "true"`).
    pub fn fair_sharing(&self) -> bool {
        self.annotation(keys::FAIR_SHARING_ANNOTATION)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// This quota's fair-sharing weight in thousandths (1000 when it names
    /// none), or why its annotation cannot be read.
    pub fn fair_share_weight_milli(&self) -> Result<i64, String> {
        match self.annotation(keys::FAIR_SHARE_WEIGHT_ANNOTATION) {
            None => Ok(1000),
            Some(text) => parse_weight_milli(text).ok_or_else(|| {
                format!(
                    "annotation {}: {text:?} is not a positive number with at most 3 decimals (such as \"1\", \"2.5\")",
                    keys::FAIR_SHARE_WEIGHT_ANNOTATION
                )
            }),
        }
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    /// Whether this quota is an inner node (no job may map to it).
    pub fn is_parent(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::QUOTA_IS_PARENT_LABEL))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }
}

/// A weight such as `2` or `0.25` in thousandths; `None` unless positive,
/// at most 3 decimals and at most 1,000,000.
pub fn parse_weight_milli(text: &str) -> Option<i64> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty()
        || fraction.len() > 3
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: i64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction: i64 = format!("{fraction:0<3}").parse().ok()?;
    let milli = whole.checked_mul(1000)?.checked_add(fraction)?;
    (1..=1_000_000_000).contains(&milli).then_some(milli)
}

/// The namespaces whose jobs may use a quota with `meta`: its own, and those
/// its annotation `quota.scheduling.koordinator.sh/namespaces` lists (a JSON
/// array of strings). A malformed annotation grants nothing beyond its own
/// namespace; the error says why.
pub fn served_namespaces(meta: &ObjectMeta) -> (Vec<String>, Option<String>) {
    let own = meta.namespace.clone().unwrap_or_default();
    let mut out = vec![own];
    let Some(text) = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::QUOTA_NAMESPACES_ANNOTATION))
    else {
        return (out, None);
    };
    match serde_json::from_str::<Vec<String>>(text) {
        Ok(listed) => {
            out.extend(listed.into_iter().filter(|n| !n.is_empty()));
            out.sort();
            out.dedup();
            (out, None)
        }
        Err(e) => (
            out,
            Some(format!(
                "annotation {} is not a JSON array of namespace names: {e}",
                keys::QUOTA_NAMESPACES_ANNOTATION
            )),
        ),
    }
}

/// Order of precedence among ElasticQuotas of the same name (names are
/// unique cluster-wide, as Koordinator's parent label names quotas by name):
/// the oldest wins, then the one whose namespace sorts first. `Less` means
/// `a` wins.
pub fn precedence(a: &ObjectMeta, b: &ObjectMeta) -> Ordering {
    precedence_key(a).cmp(&precedence_key(b))
}

/// The key [`precedence`] orders by: creation time in seconds (a quota
/// without one, never stored, comes last), then namespace.
pub fn precedence_key(meta: &ObjectMeta) -> (i64, String) {
    let created = meta
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| t.0.as_second());
    (created, meta.namespace.clone().unwrap_or_default())
}

/// The winners among quotas by name: for each name, the quota that takes
/// precedence; the others are returned as shadowed `(namespace, name)`.
pub fn winners<'a, T: 'a>(
    quotas: impl IntoIterator<Item = &'a T>,
    meta: impl Fn(&T) -> &ObjectMeta,
) -> (BTreeMap<String, &'a T>, Vec<(String, String)>) {
    let mut best: BTreeMap<String, &'a T> = BTreeMap::new();
    let mut shadowed = Vec::new();
    for quota in quotas {
        let m = meta(quota);
        let name = m.name.clone().unwrap_or_default();
        match best.get(&name) {
            Some(current) if precedence(meta(current), m) != Ordering::Greater => {
                shadowed.push((m.namespace.clone().unwrap_or_default(), name));
            }
            Some(current) => {
                let loser = meta(current).namespace.clone().unwrap_or_default();
                shadowed.push((loser, name.clone()));
                best.insert(name, quota);
            }
            None => {
                best.insert(name, quota);
            }
        }
    }
    shadowed.sort();
    (best, shadowed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn fair_share_weights_read_as_thousandths() {
        for (text, milli) in [
            ("1", Some(1000)),
            ("2", Some(2000)),
            ("0.5", Some(500)),
            (" 2.25 ", Some(2250)),
            (".5", Some(500)),
            ("3.", Some(3000)),
            ("0", None),
            ("0.0001", None),
            ("-1", None),
            ("1e3", None),
            ("", None),
            (".", None),
            ("two", None),
            ("1000000.001", None),
            ("1000000", Some(1_000_000_000)),
        ] {
            assert_eq!(parse_weight_milli(text), milli, "{text:?}");
        }
        let quota = |annotations: serde_json::Value| -> ElasticQuota {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
                "metadata": { "name": "q", "annotations": annotations }, "spec": {},
            }))
            .unwrap()
        };
        let plain = quota(serde_json::json!({}));
        assert_eq!(
            (plain.fair_sharing(), plain.fair_share_weight_milli()),
            (false, Ok(1000))
        );
        let fair = quota(serde_json::json!({
            keys::FAIR_SHARING_ANNOTATION: "True", keys::FAIR_SHARE_WEIGHT_ANNOTATION: "2" }));
        assert_eq!(
            (fair.fair_sharing(), fair.fair_share_weight_milli()),
            (true, Ok(2000))
        );
        let bad = quota(serde_json::json!({ keys::FAIR_SHARE_WEIGHT_ANNOTATION: "heavy" }));
        assert!(
            bad.fair_share_weight_milli()
                .unwrap_err()
                .contains("\"heavy\" is not a positive number")
        );
    }

    fn meta(ns: &str, name: &str, secs: Option<i64>, listed: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            creation_timestamp: secs
                .map(|s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())),
            annotations: listed
                .map(|l| [(keys::QUOTA_NAMESPACES_ANNOTATION.to_string(), l.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn served_namespaces_are_its_own_and_the_listed() {
        let (ns, err) = served_namespaces(&meta("team-a", "q", None, None));
        assert_eq!((ns, err), (vec!["team-a".to_string()], None));
        let (ns, err) = served_namespaces(&meta("team-a", "q", None, Some(r#"["b","c",""]"#)));
        assert_eq!(ns, ["b", "c", "team-a"]);
        assert!(err.is_none());
        let (ns, err) = served_namespaces(&meta("team-a", "q", None, Some("b,c")));
        assert_eq!(ns, ["team-a"]);
        assert!(err.unwrap().contains("JSON array"));
    }

    #[test]
    fn the_oldest_quota_of_a_name_wins() {
        let quotas = [
            meta("b", "q", Some(20), None),
            meta("a", "q", Some(30), None),
            meta("c", "q", Some(10), None),
            meta("z", "other", None, None),
            meta("d", "q", Some(10), None),
        ];
        let (best, shadowed) = winners(quotas.iter(), |m| m);
        assert_eq!(best["q"].namespace.as_deref(), Some("c"));
        assert_eq!(best["other"].namespace.as_deref(), Some("z"));
        let names: Vec<_> = shadowed.iter().map(|(ns, _)| ns.as_str()).collect();
        assert_eq!(names, ["a", "b", "d"]);
    }
}
