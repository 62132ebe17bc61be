//! Writes to a pod group: its hold lives on each member pod (the
//! scheduling gate), so a release and a send-back fan out to the members
//! the group's label selector lists. Only members that name the group's
//! unit are touched; which gated ones a release lifts is
//! [`pod_group::release_plan`]'s: whole at first, then into the room left,
//! never a member larger than its pod set's size in the unit — so a pod
//! that joined a group with more than the group was sized for stays gated,
//! whatever reached the webhook.

use k8s_openapi::api::core::v1::Pod;
use koord_queue_api::jobs::pod_group::{self, Member};
use koord_queue_api::jobs::{self, HoldWrite, JobState};
use koord_queue_api::keys;
use kube::api::{Api, ListParams};

use super::writer::{Writer, split};
use crate::controller::job_ref::{GroupTarget, JobRef};
use crate::controller::records::Key;

/// A member pod as listed: its record for the plan, and what a write to it
/// is conditional on.
struct Listed {
    member: Member,
    uid: Option<String>,
    resource_version: Option<String>,
}

impl Writer {
    /// The group's members that name unit `unit_name`.
    async fn members(
        &self,
        job: &JobRef,
        group: &GroupTarget,
        unit_name: &str,
    ) -> Result<Vec<Listed>, kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &job.namespace);
        let list = pods
            .list(&ListParams::default().labels(&group.selector))
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|pod| {
                let value = serde_json::to_value(&pod).ok()?;
                if jobs::annotation(&value, keys::QUEUE_UNIT_ANNOTATION) != Some(unit_name) {
                    return None;
                }
                let of = pod_group::membership(&value)?.ok()?;
                let adapter = job.adapter;
                let requests = value
                    .get("spec")
                    .map(jobs::pod_spec_requests)
                    .transpose()
                    .ok()??;
                Some(Listed {
                    member: Member {
                        name: pod.metadata.name.clone()?,
                        role: of.role,
                        gated: adapter.is_held(&value),
                        state: adapter.state(&value),
                        deleting: pod.metadata.deletion_timestamp.is_some(),
                        created_ms: pod
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .map_or(0, |t| t.0.as_millisecond()),
                        requests,
                    },
                    uid: pod.metadata.uid.clone(),
                    resource_version: pod.metadata.resource_version.clone(),
                })
            })
            .collect())
    }

    /// Lifts the gate of the members the plan names, by the unit's pod sets
    /// (read from the unit: what the webhook sized the group as).
    pub(super) async fn release_group(
        &self,
        unit: &Key,
        job: &JobRef,
        group: &GroupTarget,
    ) -> Result<(), kube::Error> {
        let (ns, unit_name) = split(unit);
        let Some(stored) = self.units(ns).get_opt(unit_name).await? else {
            return Ok(());
        };
        let sets = pod_group::set_limits(&stored);
        let listed = self.members(job, group, unit_name).await?;
        let members: Vec<Member> = listed.iter().map(|l| l.member.clone()).collect();
        let lift = match pod_group::release_plan(&members, &sets) {
            Ok(lift) => lift,
            Err(waiting) => {
                tracing::debug!(%unit, group = %group.name, %waiting, "no member released yet");
                return Ok(());
            }
        };
        let release = jobs::release_write(job.adapter);
        for name in &lift {
            let uid = listed
                .iter()
                .find(|l| &l.member.name == name)
                .and_then(|l| l.uid.as_deref());
            match self.write_job(&job.member(name, uid), &release, None).await {
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                other => other?,
            }
        }
        if !lift.is_empty() {
            tracing::info!(%unit, group = %group.name, released = lift.len(), "released members of a pod group");
        }
        Ok(())
    }

    /// Sends a group back: every member that was released is deleted (a
    /// gate cannot be put back; the members' owner creates them again,
    /// gated), unless the group has finished meanwhile. Each delete is
    /// conditional on the member as listed.
    pub(super) async fn hold_group(
        &self,
        unit: &Key,
        job: &JobRef,
        group: &GroupTarget,
    ) -> Result<(), kube::Error> {
        let (_, unit_name) = split(unit);
        let listed = self.members(job, group, unit_name).await?;
        let members: Vec<Member> = listed.iter().map(|l| l.member.clone()).collect();
        if pod_group::group_state(&members, group.size).state == JobState::Succeeded {
            tracing::debug!(group = %group.name, "not held again: it finished meanwhile");
            return Ok(());
        }
        for l in listed.iter().filter(|l| !l.member.gated) {
            let member = job.member(&l.member.name, l.uid.as_deref());
            match self
                .write_job(&member, &HoldWrite::Delete, l.resource_version.as_deref())
                .await
            {
                // Gone, or changed since the list: the next look decides.
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                other => other?,
            }
        }
        tracing::info!(%unit, group = %group.name,
            "released members of a pod group deleted: a gate cannot be put back");
        Ok(())
    }
}
