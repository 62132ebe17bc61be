//! Lease-based leader election against a real kube-apiserver (tier 1): one
//! leader at a time, fast hand-over on release, takeover only after expiry
//! on a crash, and stepping down when the Lease is taken away.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use koord_queue_runtime::{LeaderElector, LeaderHandle, LeaseConfig};
use koord_queue_tests::proxy::{Mode, Proxy};
use koord_queue_tests::{fixtures, shared};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

const LEASE_DURATION: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
const RETRY_PERIOD: Duration = Duration::from_millis(300);

/// A namespace of its own, a lease name of its own, and its Lease API.
async fn setup() -> (String, String, Api<Lease>) {
    let cp = shared::tier1().await.unwrap();
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, false).await.unwrap();
    let name = fixtures::unique_name("leader");
    (ns.clone(), name, Api::namespaced(client, &ns))
}

/// A candidate with its own client, as a separate replica would have.
async fn candidate(ns: &str, name: &str, identity: &str) -> LeaderHandle {
    let client = shared::tier1().await.unwrap().client().await.unwrap();
    let config = LeaseConfig {
        lease_duration: LEASE_DURATION,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY_PERIOD,
        ..LeaseConfig::new(ns, name, identity)
    };
    LeaderElector::spawn(client, config)
}

fn now_micro_time() -> MicroTime {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    MicroTime(Timestamp::from_microsecond(since.as_micros().try_into().unwrap()).unwrap())
}

fn system_time(time: &MicroTime) -> SystemTime {
    let micros = u64::try_from(time.0.as_microsecond()).unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_micros(micros)
}

async fn spec(api: &Api<Lease>, name: &str) -> LeaseSpec {
    api.get(name).await.unwrap().spec.unwrap_or_default()
}

async fn holder(api: &Api<Lease>, name: &str) -> String {
    spec(api, name).await.holder_identity.unwrap_or_default()
}

/// Waits until exactly one of `candidates` leads and returns its index.
async fn one_leader(candidates: &[&LeaderHandle], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let leaders: Vec<usize> = (0..candidates.len())
            .filter(|&i| candidates[i].is_leader())
            .collect();
        assert!(leaders.len() <= 1, "several leaders at once: {leaders:?}");
        if let [leader] = leaders[..] {
            return leader;
        }
        assert!(Instant::now() < deadline, "no leader within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_candidates_leads() {
    let (ns, name, api) = setup().await;
    let a = candidate(&ns, &name, "replica-a").await;
    let b = candidate(&ns, &name, "replica-b").await;
    let candidates = [&a, &b];
    let identities = ["replica-a", "replica-b"];

    let first = one_leader(&candidates, Duration::from_secs(10)).await;
    // Many renewals (retry 300ms) and standby polls: never two leaders.
    let watch_until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < watch_until {
        assert!(
            !(a.is_leader() && b.is_leader()),
            "both candidates lead at once"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let leader = one_leader(&candidates, Duration::from_secs(5)).await;
    assert_eq!(leader, first, "leadership moved without any failure");

    let lease = spec(&api, &name).await;
    assert_eq!(lease.holder_identity.as_deref(), Some(identities[leader]));
    assert_eq!(lease.lease_duration_seconds, Some(2));
    assert_eq!(
        lease.lease_transitions,
        Some(0),
        "created, never taken over"
    );
    assert!(lease.acquire_time.is_some() && lease.renew_time.is_some());
    assert!(*candidates[leader].subscribe().borrow());
    assert!(!*candidates[1 - leader].subscribe().borrow());

    a.release().await;
    b.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_over_before_the_lease_expires() {
    let (ns, name, api) = setup().await;
    let mut candidates = [
        Some(candidate(&ns, &name, "replica-a").await),
        Some(candidate(&ns, &name, "replica-b").await),
    ];
    let identities = ["replica-a", "replica-b"];
    let leader = {
        let refs: Vec<&LeaderHandle> = candidates.iter().flatten().collect();
        one_leader(&refs, Duration::from_secs(10)).await
    };
    let standby = 1 - leader;
    let old = candidates[leader].take().unwrap();
    let new = candidates[standby].take().unwrap();
    let old_view = old.leadership();
    let mut new_rx = new.subscribe();
    assert!(!*new_rx.borrow_and_update());

    let released_at = Instant::now();
    old.release().await;
    assert!(!old_view.is_leader(), "a released candidate does not lead");
    let after_release = holder(&api, &name).await;
    assert!(
        after_release.is_empty() || after_release == identities[standby],
        "released, or already taken by the standby: {after_release:?}"
    );
    tokio::time::timeout(LEASE_DURATION, new_rx.wait_for(|leading| *leading))
        .await
        .expect("the standby must lead before the lease would have expired")
        .unwrap();
    let handover = released_at.elapsed();
    assert!(new.is_leader());
    // The lease was renewed at most a retry period before the release, so
    // expiry alone could not have handed it over this soon.
    assert!(
        handover < LEASE_DURATION - RETRY_PERIOD,
        "hand-over took {handover:?}"
    );

    let lease = spec(&api, &name).await;
    assert_eq!(lease.holder_identity.as_deref(), Some(identities[standby]));
    assert_eq!(lease.lease_transitions, Some(1));
    new.release().await;
    assert_eq!(holder(&api, &name).await, "", "released on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_leader_is_replaced_only_after_the_lease_expires() {
    let (ns, name, api) = setup().await;
    let mut candidates = [
        Some(candidate(&ns, &name, "replica-a").await),
        Some(candidate(&ns, &name, "replica-b").await),
    ];
    let identities = ["replica-a", "replica-b"];
    let leader = {
        let refs: Vec<&LeaderHandle> = candidates.iter().flatten().collect();
        one_leader(&refs, Duration::from_secs(10)).await
    };
    let standby = 1 - leader;
    let crashed = candidates[leader].take().unwrap();
    let new = candidates[standby].take().unwrap();
    let crashed_view = crashed.leadership();

    // Dropping the handle aborts the task: no release, as in a crash.
    drop(crashed);
    let crashed_at = Instant::now();
    fixtures::eventually(Duration::from_secs(1), || {
        let leading = crashed_view.is_leader();
        async move { Ok(!leading) }
    })
    .await
    .unwrap();
    let last = spec(&api, &name).await;
    assert_eq!(last.holder_identity.as_deref(), Some(identities[leader]));

    // The standby saw the last renewal no earlier than its renewTime (the
    // control plane shares this machine's clock), and must wait a full
    // lease duration from then. A renewal still landing after the abort
    // only pushes the expiry later.
    let expiry = system_time(&last.renew_time.unwrap()) + LEASE_DURATION;
    let margin = Duration::from_millis(20);
    while SystemTime::now() + margin < expiry {
        assert!(
            !new.is_leader(),
            "took over {:?} before the lease expired",
            expiry.duration_since(SystemTime::now()).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fixtures::eventually(LEASE_DURATION * 2, || {
        let leading = new.is_leader();
        async move { Ok(leading) }
    })
    .await
    .unwrap();
    let takeover = crashed_at.elapsed();
    // At most one renewal interval ahead of the crash, plus some slack.
    assert!(
        takeover >= LEASE_DURATION - 2 * RETRY_PERIOD,
        "took over {takeover:?} after the crash, before expiry"
    );

    let lease = spec(&api, &name).await;
    assert_eq!(lease.holder_identity.as_deref(), Some(identities[standby]));
    assert_eq!(lease.lease_transitions, Some(1));
    new.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_steps_down_when_the_lease_is_taken_away() {
    let (ns, name, api) = setup().await;
    let leader = candidate(&ns, &name, "replica-a").await;
    one_leader(&[&leader], Duration::from_secs(10)).await;
    let mut rx = leader.subscribe();

    // Another identity overwrites the Lease unconditionally, as a
    // competitor that believes the lease expired would.
    let now = now_micro_time();
    let overwritten_at = Instant::now();
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": {
            "holderIdentity": "intruder",
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 1,
        }})),
    )
    .await
    .unwrap();

    let budget = RENEW_DEADLINE + RETRY_PERIOD;
    tokio::time::timeout(budget, rx.wait_for(|leading| !*leading))
        .await
        .expect("the old leader must step down within renew deadline + retry period")
        .unwrap();
    let lost_after = overwritten_at.elapsed();
    assert!(!leader.is_leader());
    assert!(lost_after <= budget, "stepped down after {lost_after:?}");

    // As a standby it leaves the intruder's lease alone until it expires...
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(holder(&api, &name).await, "intruder");
    assert!(!leader.is_leader());
    // ...and, since the intruder never renews, takes it back afterwards.
    fixtures::eventually(LEASE_DURATION * 3, || {
        let leading = leader.is_leader();
        async move { Ok(leading) }
    })
    .await
    .unwrap();
    let lease = spec(&api, &name).await;
    assert_eq!(lease.holder_identity.as_deref(), Some("replica-a"));
    assert_eq!(lease.lease_transitions, Some(2));
    leader.release().await;
}

/// An admin client that reaches the API server through `proxy`.
async fn client_through(proxy: &Proxy) -> kube::Client {
    let cp = shared::tier1().await.unwrap();
    let kubeconfig = Kubeconfig::read_from(cp.kubeconfig()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
    config.cluster_url = proxy.url().parse().unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_cut_off_from_the_api_server_steps_down_before_the_lease_expires() {
    let (ns, name, api) = setup().await;
    let proxy = Proxy::start(shared::tier1().await.unwrap().server())
        .await
        .unwrap();
    let config = LeaseConfig {
        lease_duration: LEASE_DURATION,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY_PERIOD,
        ..LeaseConfig::new(&ns, &name, "replica-a")
    };
    let cut_off = LeaderElector::spawn(client_through(&proxy).await, config);
    one_leader(&[&cut_off], Duration::from_secs(10)).await;
    let standby = candidate(&ns, &name, "replica-b").await;
    tokio::time::sleep(RETRY_PERIOD * 2).await;
    assert!(cut_off.is_leader() && !standby.is_leader());

    proxy.set(Mode::Cut);
    let cut_at = Instant::now();
    // The last successful renewal started at most a retry period (plus a
    // request) before the cut; leadership ends a renew deadline after it,
    // and before the standby can take over.
    let mut took_over_while_leading = false;
    while cut_off.is_leader() {
        took_over_while_leading |= standby.is_leader();
        assert!(
            cut_at.elapsed() < RENEW_DEADLINE + Duration::from_millis(100),
            "still leader {:?} after losing the API server",
            cut_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!took_over_while_leading, "two leaders at once");
    // The flag ends on time by itself; subscribers hear of it right after.
    tokio::time::timeout(
        Duration::from_millis(500),
        cut_off.subscribe().wait_for(|leading| !*leading),
    )
    .await
    .expect("subscribers learn of the loss")
    .unwrap();
    // Nothing was written on the way out: the lease still names it until
    // the standby takes over on expiry.
    assert_eq!(holder(&api, &name).await, "replica-a");
    fixtures::eventually(LEASE_DURATION * 2, || {
        let leading = standby.is_leader();
        async move { Ok(leading) }
    })
    .await
    .unwrap();
    assert!(!cut_off.is_leader());

    // Reconnected, the old leader stays a standby behind the new one.
    proxy.set(Mode::Open);
    tokio::time::sleep(LEASE_DURATION).await;
    assert!(!cut_off.is_leader() && standby.is_leader());
    assert_eq!(holder(&api, &name).await, "replica-b");
    cut_off.release().await;
    standby.release().await;
}
