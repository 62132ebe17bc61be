//! The plan's decisions at chosen times: create, reuse, renew, rotate,
//! prune, repair; and the settings' checks.

use std::time::Duration;

use time::OffsetDateTime;

use super::config::BootstrapConfig;
use super::material::{Material, split_pem};
use super::parse_duration;
use super::plan::{Change, plan, signed_by};
use crate::{Authority, ServingNames};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn config() -> BootstrapConfig {
    BootstrapConfig {
        namespace: "koord-queue".into(),
        secret: "tls".into(),
        webhook_configuration: Some("kq".into()),
        api_service: None,
        names: ServingNames::for_service("kq-webhook", "koord-queue"),
        common_name: "kq-webhook".into(),
        cert_validity: 365 * DAY,
        renew_before: 30 * DAY,
        ca_validity: 3650 * DAY,
        ca_renew_before: 365 * DAY,
        out_dir: None,
    }
}

fn later(days: u64) -> OffsetDateTime {
    OffsetDateTime::now_utc() + DAY * days as u32
}

#[test]
fn creates_then_reuses() {
    let cfg = config();
    let first = plan(None, &cfg, OffsetDateTime::now_utc()).unwrap();
    assert!(matches!(first.change, Change::Created(_)));
    assert_eq!(split_pem(&first.material.ca_bundle).len(), 1);
    assert!(signed_by(&first.material.cert, &first.material.ca_bundle));
    let again = plan(Some(&first.material), &cfg, OffsetDateTime::now_utc()).unwrap();
    assert_eq!(again.change, Change::Unchanged);
    assert_eq!(again.material, first.material);
}

#[test]
fn renews_the_serving_certificate_before_it_expires() {
    let cfg = config();
    let first = plan(None, &cfg, OffsetDateTime::now_utc())
        .unwrap()
        .material;
    // 340 days on, 25 days are left: under the 30 days of renew-before.
    let renewed = plan(Some(&first), &cfg, later(340)).unwrap();
    assert!(
        matches!(renewed.change, Change::RenewedServing(ref r) if r.contains("expires")),
        "{:?}",
        renewed.change
    );
    assert_eq!(renewed.material.ca_bundle, first.ca_bundle, "same CA");
    assert_eq!(renewed.material.ca_key, first.ca_key);
    assert_ne!(renewed.material.cert, first.cert);
    assert!(signed_by(&renewed.material.cert, &first.ca_bundle));
}

#[test]
fn rotates_the_ca_and_keeps_the_old_one_trusted() {
    let cfg = config();
    let first = plan(None, &cfg, OffsetDateTime::now_utc())
        .unwrap()
        .material;
    let rotated = plan(Some(&first), &cfg, later(3300)).unwrap();
    assert!(
        matches!(rotated.change, Change::RotatedCa(_)),
        "{:?}",
        rotated.change
    );
    let bundle = split_pem(&rotated.material.ca_bundle);
    assert_eq!(bundle.len(), 2, "new CA first, then the previous one");
    assert_eq!(bundle[1], first.ca_bundle);
    assert!(signed_by(&rotated.material.cert, &bundle[0]));
}

#[test]
fn expired_cas_leave_the_bundle() {
    let cfg = config();
    let good = plan(None, &cfg, OffsetDateTime::now_utc())
        .unwrap()
        .material;
    let old = Authority::generate("old", Duration::from_secs(1)).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let found = Material {
        ca_bundle: format!("{}{}", good.ca_bundle, old.cert_pem()),
        ..good.clone()
    };
    let p = plan(Some(&found), &cfg, OffsetDateTime::now_utc()).unwrap();
    assert_eq!(p.change, Change::PrunedBundle);
    assert_eq!(p.material, good);
}

#[test]
fn repairs_broken_or_foreign_material() {
    let cfg = config();
    let good = plan(None, &cfg, OffsetDateTime::now_utc())
        .unwrap()
        .material;
    let other = plan(None, &cfg, OffsetDateTime::now_utc())
        .unwrap()
        .material;

    let wrong_key = Material {
        key: other.key.clone(),
        ..good.clone()
    };
    let p = plan(Some(&wrong_key), &cfg, OffsetDateTime::now_utc()).unwrap();
    assert!(
        matches!(p.change, Change::RenewedServing(ref r) if r.contains("tls.key")),
        "{:?}",
        p.change
    );

    let foreign = Material {
        cert: other.cert.clone(),
        key: other.key.clone(),
        ..good.clone()
    };
    let p = plan(Some(&foreign), &cfg, OffsetDateTime::now_utc()).unwrap();
    assert!(
        matches!(p.change, Change::RenewedServing(ref r) if r.contains("not issued")),
        "{:?}",
        p.change
    );

    let mut more = cfg.clone();
    more.names.ips.push([127, 0, 0, 1].into());
    let p = plan(Some(&good), &more, OffsetDateTime::now_utc()).unwrap();
    assert!(
        matches!(p.change, Change::RenewedServing(ref r) if r.contains("127.0.0.1")),
        "{:?}",
        p.change
    );

    let bad_ca = Material {
        ca_key: other.ca_key.clone(),
        ..good.clone()
    };
    let p = plan(Some(&bad_ca), &cfg, OffsetDateTime::now_utc()).unwrap();
    assert!(
        matches!(p.change, Change::Created(ref r) if r.contains("ca.key")),
        "{:?}",
        p.change
    );

    let garbage = Material {
        ca_bundle: "garbage".into(),
        ..good
    };
    assert!(matches!(
        plan(Some(&garbage), &cfg, OffsetDateTime::now_utc())
            .unwrap()
            .change,
        Change::Created(_)
    ));
}

#[test]
fn settings_and_durations_are_checked() {
    let mut cfg = config();
    cfg.renew_before = cfg.cert_validity;
    assert!(
        cfg.validate()
            .unwrap_err()
            .to_string()
            .contains("--renew-before (365d)")
    );
    let mut cfg = config();
    cfg.names = ServingNames::default();
    assert!(cfg.validate().is_err());
    assert_eq!(parse_duration("30d"), Ok(30 * DAY));
    assert_eq!(parse_duration("720h"), Ok(30 * DAY));
    assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("1y").is_err());
}
