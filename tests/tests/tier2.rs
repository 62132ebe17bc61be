//! Foundation checks against the full local control plane (tier 2): the
//! controller manager creates pods, the scheduler binds them to kwok nodes,
//! kwok runs and completes them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use koord_queue_tests::{fixtures, shared};
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};

#[tokio::test]
async fn job_with_two_completions_completes_on_kwok_nodes() {
    let cp = shared::tier2().await.unwrap();
    assert_eq!(cp.nodes().len(), 3);
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, false).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client, &ns);
    let job: Job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": "two" },
        "spec": {
            "completions": 2,
            "parallelism": 1,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main", "image": "busybox",
                    "resources": { "requests": { "cpu": "1", "memory": "64Mi" } }
                }]
            }}
        }
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(jobs.clone(), "two", conditions::is_job_completed()),
    )
    .await
    .unwrap_or_else(|_| panic!("job did not complete; logs in {}", cp.dir().display()))
    .unwrap();
    let status = jobs.get("two").await.unwrap().status.unwrap();
    assert_eq!(status.succeeded, Some(2));
    let complete = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Complete" && c.status == "True");
    assert!(complete, "Job has no Complete condition");
}
