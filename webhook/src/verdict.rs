//! What an admission decision comes to ([`Verdict`]) and what it is made
//! on besides the request ([`RequestObjects`]): shared by the decisions on
//! creates ([`crate::admit`]) and on updates ([`crate::update`]), and
//! carried out by [`crate::service`].

use koord_queue_api::jobs::JobAdapter;
use koord_queue_api::queue_unit::QueueUnit;
use serde_json::Value;

use crate::ownership::{ChildClaim, OwnerRef};

/// What to do with a request.
#[derive(Debug)]
pub enum Verdict {
    /// Let it through unchanged.
    Allow,
    /// Hold the job (`patch`) and queue it (`unit`, created unless dry-run,
    /// once the job is stored).
    Hold {
        /// JSON Patch relative to the submitted object.
        patch: json_patch::Patch,
        /// The job's QueueUnit as the review describes it.
        unit: Box<QueueUnit>,
        /// The job's kind.
        adapter: &'static dyn JobAdapter,
        /// The job's name (a pod group's unit names the group instead).
        job: String,
        /// A pod group's member: checked against the group's unit, if it
        /// exists, before it is let in.
        member: Option<Box<GroupMember>>,
    },
    /// The UPDATE lifts the hold of a queued job: allowed only if the unit
    /// named here holds quota now (released, not finished).
    CheckRelease {
        /// Namespace of the job and its unit.
        namespace: String,
        /// Name of the job.
        job: String,
        /// Name of the job's QueueUnit.
        unit: String,
    },
    /// The object claims to be a managed job's child: allowed if the claim
    /// is proven ([`crate::ownership::prove`]), else `fallback`.
    CheckChild {
        /// The claim.
        claim: Box<ChildClaim>,
        /// The verdict when it is not proven.
        fallback: Box<Verdict>,
    },
    /// An update removing a child's controller reference: allowed when the
    /// owner is gone or being deleted with the `orphan` finalizer (the
    /// garbage collector orphaning it), refused otherwise.
    CheckOrphaning {
        /// The owner the reference named.
        owner: Box<OwnerRef>,
        /// Namespace of both.
        namespace: String,
        /// The child, for messages.
        child: String,
    },
    /// A `/scale` update that adds replicas: refused when the object is
    /// queued or a managed job's child (read by the caller).
    CheckScale {
        /// The object's kind.
        adapter: &'static dyn JobAdapter,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Replicas before and after.
        replicas: (i64, i64),
    },
    /// Refuse, with the message the user sees.
    Deny(String),
}

/// What a pod group's member must agree with in its group's unit.
#[derive(Debug)]
pub struct GroupMember {
    /// The group.
    pub group: String,
    /// Its pod set in the group.
    pub role: &'static str,
    /// The group's size as the member says.
    pub size: i32,
    /// What the member requests.
    pub requests: koord_queue_api::Resources,
}

/// The objects of a request as raw JSON. They are taken out of the review
/// before it is parsed, so a job is read once and never round-trips through
/// a typed object.
#[derive(Debug, Default)]
pub struct RequestObjects {
    /// `request.object`.
    pub object: Option<Value>,
    /// `request.oldObject`.
    pub old: Option<Value>,
}

/// The object `which` of a request as a JSON object.
pub(crate) fn object_json<'a>(object: Option<&'a Value>, which: &str) -> Result<&'a Value, String> {
    match object {
        Some(v) if v.is_object() => Ok(v),
        Some(Value::Null) | None => Err(format!("the request carries no {which}")),
        Some(_) => Err(format!("the {which} is not a JSON object")),
    }
}
