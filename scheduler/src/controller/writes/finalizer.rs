//! The quota finalizer on a unit (`records::QUOTA_FINALIZER`): put on
//! when the unit is released, taken off once it is deleted and no pod it
//! paid for is alive (`state/decide.rs`).

use kube::api::{ObjectMeta, Patch, PatchParams};

use koord_queue_api::QueueUnit;
use serde_json::json;

use super::writer::{Writer, split};
use crate::controller::records::{Key, QUOTA_FINALIZER};

/// The field manager that owns the finalizer on units. Its own name, so
/// that applying the finalizer neither takes nor drops the fields the
/// scheduler's other writes own.
const FINALIZER_MANAGER: &str = "koord-queue-scheduler-quota";

impl Writer {
    /// Puts the quota finalizer on `unit`: a server-side apply of that one
    /// list entry, so that other finalizers stay and nothing is read first.
    pub(super) async fn guard_unit(&self, unit: &Key) -> Result<(), kube::Error> {
        self.fence()?;
        let (ns, name) = split(unit);
        let body = json!({
            "apiVersion": <QueueUnit as kube::Resource>::api_version(&()),
            "kind": <QueueUnit as kube::Resource>::kind(&()),
            "metadata": { "name": name, "finalizers": [QUOTA_FINALIZER] },
        });
        self.unit_acks(ns)
            .patch(
                name,
                &PatchParams::apply(FINALIZER_MANAGER),
                &Patch::Apply(&body),
            )
            .await?;
        Ok(())
    }

    /// Takes the quota finalizer off `unit`, whoever put it on.
    ///
    /// Where the watch showed it (`at`, its index in the unit's finalizers)
    /// one JSON patch tests that it is still there and removes it: no read
    /// first. That read was one request of every job's eleven in Kueue's
    /// large shape, where the API server is what bounds the run. If the
    /// list changed meanwhile the test fails (422) and the finalizers are
    /// read and written back without it, conditional on the
    /// resourceVersion read (a 409 when they changed again; the controller
    /// tries again).
    pub(super) async fn remove_quota_finalizer(
        &self,
        unit: &Key,
        at: Option<u16>,
    ) -> Result<Option<u64>, kube::Error> {
        self.fence()?;
        let (ns, name) = split(unit);
        if let Some(at) = at {
            let path = format!("/metadata/finalizers/{at}");
            let patch: json_patch::Patch = serde_json::from_value(json!([
                { "op": "test", "path": path, "value": QUOTA_FINALIZER },
                { "op": "remove", "path": path },
            ]))
            .map_err(kube::Error::SerdeError)?;
            match self
                .unit_acks(ns)
                .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
            {
                Ok(ack) => {
                    return Ok(crate::controller::records::rv_number(
                        ack.resource_version(),
                    ));
                }
                // The last finalizer off a deleting object removes it.
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
                // Moved or gone: read them.
                Err(kube::Error::Api(e)) if e.code == 422 => {}
                Err(e) => return Err(e),
            }
            self.fence()?;
        }
        let units = self.units(ns);
        let Some(meta) = units.get_metadata_opt(name).await? else {
            return Ok(None);
        };
        let ObjectMeta {
            finalizers,
            resource_version,
            ..
        } = meta.metadata;
        let finalizers = finalizers.unwrap_or_default();
        if !finalizers.iter().any(|f| f == QUOTA_FINALIZER) {
            return Ok(None);
        }
        let rest: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != QUOTA_FINALIZER)
            .collect();
        self.fence()?;
        let patched = self
            .unit_acks(ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": {
                    "resourceVersion": resource_version, "finalizers": rest,
                } })),
            )
            .await;
        match patched {
            Ok(ack) => Ok(crate::controller::records::rv_number(
                ack.resource_version(),
            )),
            // The last finalizer off a deleting object removes it.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }
}
