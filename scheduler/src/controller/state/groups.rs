//! Pod groups in the controller: the Pod watch sees members, the lifecycle
//! wants one job per unit. Members are folded here into one record of their
//! group (key `PodGroup/<namespace>/<group>`), which then goes the way of
//! any job record: held while no member was released, its state the
//! members' ([`pod_group::group_state`]), gone with its last member.

use koord_queue_api::jobs::pod_group::{self, Member};

use std::collections::{BTreeMap, HashMap};

use super::split_key;
use crate::controller::records::{Grouping, JobKey, JobRecord, Key, intern_uid, key};

/// The groups' members, and each member pod's group.
#[derive(Debug, Default)]
pub(super) struct Groups {
    groups: HashMap<JobKey, Group>,
    of_pod: HashMap<Key, JobKey>,
}

#[derive(Debug)]
struct Group {
    /// A member's record, for the fields every member shares.
    like: JobRecord,
    selector: String,
    size: i32,
    /// By pod name: the member and its uid.
    members: BTreeMap<String, (Member, String)>,
}

impl Group {
    /// The group's record.
    fn record(&self, name: &str) -> Option<JobRecord> {
        let members: Vec<Member> = self.members.values().map(|(m, _)| m.clone()).collect();
        let state = pod_group::group_state(&members, self.size);
        let (oldest, uid) = self
            .members
            .values()
            .min_by_key(|(m, _)| (m.created_ms, m.name.clone()))
            .map(|(m, uid)| (m.clone(), uid.clone()))?;
        Some(JobRecord {
            adapter: self.like.adapter,
            namespace: self.like.namespace.clone(),
            name: name.to_string(),
            uid: intern_uid(&pod_group::group_uid(&self.like.namespace, name)),
            unit: self.like.unit.clone(),
            held: state.held,
            state: state.state,
            deleting: false,
            created_ms: oldest.created_ms,
            pod_group: None,
            grouping: Some(Box::new(Grouping::Group {
                selector: self.selector.clone(),
                size: self.size,
                gated: state.gated,
                released: state.released,
                member: (oldest.name, uid),
            })),
        })
    }
}

impl Groups {
    /// Folds member record `rec` in: its group's key and record after it.
    /// `None` when `rec` is no member.
    pub(super) fn apply(&mut self, rec: JobRecord) -> Option<(JobKey, JobRecord)> {
        let Some(Grouping::Member { of, member }) = rec.grouping.as_deref() else {
            return None;
        };
        let group_key = JobKey::new(pod_group::GROUP_KIND, &rec.namespace, &of.group);
        let pod = key(&rec.namespace, &member.name);
        if let Some(before) = self.of_pod.get(&pod)
            && before != &group_key
        {
            // Labels of a queued pod are fixed by the webhook; should they
            // change anyway, the pod leaves its first group.
            let before = before.clone();
            self.leave(&before, &member.name);
        }
        self.of_pod.insert(pod, group_key.clone());
        let (member, selector, size, uid) =
            (member.clone(), of.selector(), of.size, rec.uid.to_string());
        let group = self
            .groups
            .entry(group_key.clone())
            .or_insert_with(|| Group {
                like: rec.clone(),
                selector,
                size,
                members: BTreeMap::new(),
            });
        group.members.insert(member.name.clone(), (member, uid));
        let name = group_name(&group_key);
        group.record(&name).map(|r| (group_key, r))
    }

    /// Member pod `namespace/name` is gone: its group's key and record
    /// after it (`None`: its last member went). `None` when it was no member.
    pub(super) fn remove(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Option<(JobKey, Option<JobRecord>)> {
        let group_key = self.of_pod.remove(&key(namespace, name))?;
        let after = self.leave(&group_key, name);
        Some((group_key, after))
    }

    fn leave(&mut self, group_key: &JobKey, name: &str) -> Option<JobRecord> {
        let group = self.groups.get_mut(group_key)?;
        group.members.remove(name);
        if group.members.is_empty() {
            self.groups.remove(group_key);
            return None;
        }
        group.record(&group_name(group_key))
    }

    /// Every member pod: namespace and name.
    pub(super) fn member_pods(&self) -> Vec<(String, String)> {
        self.of_pod
            .keys()
            .map(|k| {
                let (ns, name) = split_key(k);
                (ns.to_string(), name.to_string())
            })
            .collect()
    }
}

/// The group's name, from its key.
fn group_name(group_key: &JobKey) -> String {
    let text = group_key.to_string();
    text.splitn(3, '/').nth(2).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use koord_queue_api::jobs::pod::{POD_KIND, SCHEDULING_GATE};
    use koord_queue_api::jobs::watched::WatchedJob;
    use serde_json::json;

    use super::Groups;
    use crate::controller::records::{Grouping, JobRecord};
    use koord_queue_api::jobs::{JobState, pod_group};
    use koord_queue_api::keys;

    fn member(name: &str, gated: bool, phase: &str, created: &str) -> JobRecord {
        let gates = if gated {
            json!([{ "name": SCHEDULING_GATE }])
        } else {
            json!([])
        };
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "creationTimestamp": created,
                "labels": { pod_group::POD_GROUP_LABEL: "train" },
                "annotations": { keys::QUEUE_UNIT_ANNOTATION: "train-group",
                                 pod_group::POD_GROUP_SIZE_ANNOTATION: "2" } },
            "spec": { "schedulingGates": gates, "containers": [] },
            "status": { "phase": phase },
        });
        let adapter = koord_queue_api::jobs::for_kind("", POD_KIND.kind).unwrap();
        JobRecord::from_object(adapter, WatchedJob::from_value(&pod).unwrap()).unwrap()
    }

    fn counts(rec: &JobRecord) -> (usize, usize) {
        match rec.grouping.as_deref() {
            Some(Grouping::Group {
                gated, released, ..
            }) => (*gated, *released),
            other => panic!("not a group: {other:?}"),
        }
    }

    #[test]
    fn members_fold_into_one_record_of_their_group_that_goes_with_the_last() {
        let mut groups = Groups::default();
        let first = member("b", true, "Pending", "2026-01-01T00:00:02Z");
        assert!(first.is_member());
        let (key, rec) = groups.apply(first).unwrap();
        assert_eq!(key.to_string(), "PodGroup/ns/train");
        assert_eq!(rec.key(), key);
        assert_eq!(
            (rec.name.as_str(), rec.unit_name()),
            ("train", "train-group")
        );
        assert_eq!(&*rec.uid, "PodGroup/ns/train");
        assert!(rec.held && rec.is_group());
        assert_eq!(counts(&rec), (1, 0));
        // An older member: Events go to it, and the group is as old as it.
        let (_, rec) = groups
            .apply(member("a", true, "Pending", "2026-01-01T00:00:01Z"))
            .unwrap();
        assert_eq!(counts(&rec), (2, 0));
        match rec.grouping.as_deref() {
            Some(Grouping::Group {
                member,
                selector,
                size,
                ..
            }) => {
                assert_eq!((member.0.as_str(), member.1.as_str()), ("a", "uid-a"));
                assert_eq!(
                    (selector.as_str(), *size),
                    ("koord-queue/pod-group=train", 2)
                );
            }
            other => panic!("{other:?}"),
        }
        // Released and running: no longer held.
        let (_, rec) = groups
            .apply(member("a", false, "Running", "2026-01-01T00:00:01Z"))
            .unwrap();
        assert!(!rec.held);
        assert_eq!(rec.state, JobState::Running);
        assert_eq!(counts(&rec), (1, 1));
        let mut pods = groups.member_pods();
        pods.sort();
        assert_eq!(pods, [("ns".into(), "a".into()), ("ns".into(), "b".into())]);
        // Members go; the group goes with the last one. A pod that was no
        // member is not the groups' business.
        let (_, after) = groups.remove("ns", "a").unwrap();
        assert_eq!(after.map(|r| counts(&r)), Some((1, 0)));
        assert!(groups.remove("ns", "other").is_none());
        let (key, after) = groups.remove("ns", "b").unwrap();
        assert_eq!(key.to_string(), "PodGroup/ns/train");
        assert!(after.is_none());
        assert!(groups.member_pods().is_empty());
    }
}
