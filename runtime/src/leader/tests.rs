use super::elector::jittered;
use super::*;

fn config() -> LeaseConfig {
    LeaseConfig::new("ns", "lease", "me")
}

#[test]
fn defaults_are_valid() {
    let config = config();
    assert_eq!(config.lease_duration, Duration::from_secs(15));
    assert_eq!(config.renew_deadline, Duration::from_secs(10));
    assert_eq!(config.retry_period, Duration::from_secs(2));
    assert_eq!(config.validate(), Ok(()));
    assert_eq!(config.lease_duration_seconds(), 15);
}

#[test]
fn rejects_unsafe_timings_and_empty_names() {
    let mut c = config();
    c.identity.clear();
    assert_eq!(c.validate(), Err(LeaseConfigError::Empty("identity")));

    let mut c = config();
    c.renew_deadline = c.lease_duration;
    assert!(matches!(
        c.validate(),
        Err(LeaseConfigError::LeaseDurationTooShort { .. })
    ));

    let mut c = config();
    c.retry_period = c.renew_deadline;
    assert!(matches!(
        c.validate(),
        Err(LeaseConfigError::RenewDeadlineTooShort { .. })
    ));

    let mut c = config();
    c.retry_period = Duration::ZERO;
    assert_eq!(c.validate(), Err(LeaseConfigError::ZeroRetryPeriod));

    let mut c = config();
    c.lease_duration = Duration::from_secs(u64::MAX);
    assert!(matches!(
        c.validate(),
        Err(LeaseConfigError::LeaseDurationTooLong(_))
    ));
}

#[test]
fn lease_duration_seconds_round_up() {
    let mut c = config();
    c.lease_duration = Duration::from_millis(2500);
    assert_eq!(c.lease_duration_seconds(), 3);
    c.lease_duration = Duration::from_secs(2);
    assert_eq!(c.lease_duration_seconds(), 2);
}

#[test]
fn leadership_expires_on_its_own_and_steps_down() {
    let shared = Shared::new();
    let rx = shared.leading.subscribe();
    assert!(!shared.is_leader());
    shared.lead_until(Instant::now() + Duration::from_secs(60));
    assert!(shared.is_leader());
    assert!(*rx.borrow());
    shared.step_down();
    assert!(!shared.is_leader());
    assert!(!*rx.borrow());
    // A deadline already past means no leadership, with no task needed.
    shared.lead_until(Instant::now());
    assert!(!shared.is_leader());
}

/// A client for an address where nothing listens.
fn unreachable_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn unreachable_api_server_never_leads_and_release_returns() {
    let config = LeaseConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(100),
        ..config()
    };
    let handle = LeaderElector::spawn(unreachable_client(), config);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!handle.is_leader());
    // Never held, so nothing to give up and no request to wait for.
    tokio::time::timeout(Duration::from_secs(1), handle.release())
        .await
        .unwrap();
}

#[tokio::test]
async fn invalid_config_never_campaigns() {
    let mut config = config();
    config.renew_deadline = config.lease_duration * 2;
    let handle = LeaderElector::spawn(unreachable_client(), config);
    let view = handle.leadership();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!view.is_leader());
    handle.release().await;
    assert!(!view.is_leader());
}

#[test]
fn jitter_stays_within_a_fifth() {
    let period = Duration::from_millis(300);
    for _ in 0..100 {
        let d = jittered(period);
        assert!(d >= period && d <= period + period / 5, "{d:?}");
    }
}
