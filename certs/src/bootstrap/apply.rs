//! The API writes of a pass, in the order that keeps the webhook trusted:
//! the caBundle first (it already holds any new CA), then the Secret (only
//! when it changes, by resourceVersion so a concurrent writer is not
//! overwritten), then `--out-dir`; and the loop that repeats the pass.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use time::OffsetDateTime;

use super::BootstrapError;
use super::config::BootstrapConfig;
use super::material::{
    CA_CERT_KEY, MANAGER, Material, SECRET_TYPE, TLS_CERT_KEY, TLS_KEY_KEY, split_pem,
};
use super::plan::{Change, plan};
use super::report::{Report, log_report};

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> BootstrapError {
    let what = what.into();
    move |source| BootstrapError::Api { what, source }
}

/// One pass at time `now`: read the Secret, decide, patch the caBundle, write
/// the Secret (only when it changes) and `out_dir`.
pub async fn reconcile(
    client: &kube::Client,
    config: &BootstrapConfig,
    now: OffsetDateTime,
) -> Result<Report, BootstrapError> {
    config.validate()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let what = format!("{}/{}", config.namespace, config.secret);
    // Another writer (a second replica, a rerun init container) may win a
    // race for the Secret: re-read and decide again.
    for _ in 0..5 {
        let current = secrets
            .get_opt(&config.secret)
            .await
            .map_err(api_error(format!("reading Secret {what}")))?;
        if let Some(secret) = &current {
            let type_ = secret.type_.as_deref().unwrap_or("Opaque");
            if type_ != SECRET_TYPE {
                return Err(BootstrapError::Secret(
                    what,
                    format!(
                        "has type {type_}, not {SECRET_TYPE}; delete it or choose another name"
                    ),
                ));
            }
        }
        let found = current.as_ref().and_then(Material::from_secret);
        let plan = plan(found.as_ref(), config, now)?;

        // Trust first: the bundle already holds any new CA.
        let (found_config, patched) =
            patch_ca_bundle(client, config, &plan.material.ca_bundle).await?;
        let (api_service_found, api_service_patched) =
            patch_api_service(client, config, &plan.material.ca_bundle).await?;

        if plan.change != Change::Unchanged {
            match write_secret(&secrets, config, current, &plan.material).await {
                Ok(()) => {}
                Err(BootstrapError::Api {
                    source: kube::Error::Api(e),
                    ..
                }) if e.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
        if let Some(dir) = &config.out_dir {
            write_out_dir(dir, &plan.material)?;
        }
        let first_ca = split_pem(&plan.material.ca_bundle)
            .into_iter()
            .next()
            .unwrap_or_default();
        return Ok(Report {
            change: plan.change,
            patched_webhooks: patched,
            webhook_configuration_found: found_config,
            api_service_found,
            api_service_patched,
            cert_not_after: crate::inspect::not_after(&plan.material.cert)?,
            ca_not_after: crate::inspect::not_after(&first_ca)?,
        });
    }
    Err(BootstrapError::Contended(what))
}

async fn write_secret(
    secrets: &Api<Secret>,
    config: &BootstrapConfig,
    current: Option<Secret>,
    material: &Material,
) -> Result<(), BootstrapError> {
    let what = format!("{}/{}", config.namespace, config.secret);
    match current {
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(config.secret.clone()),
                    namespace: Some(config.namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_string(),
                        MANAGER.to_string(),
                    )])),
                    ..Default::default()
                },
                type_: Some(SECRET_TYPE.into()),
                data: Some(material.data()),
                ..Default::default()
            };
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .map_err(api_error(format!("creating Secret {what}")))?;
        }
        Some(mut secret) => {
            // Replace with the resourceVersion read: a concurrent change
            // makes this fail with 409 instead of being overwritten.
            let mut data = secret.data.take().unwrap_or_default();
            data.extend(material.data());
            secret.data = Some(data);
            secret.metadata.managed_fields = None;
            secrets
                .replace(&config.secret, &PostParams::default(), &secret)
                .await
                .map_err(api_error(format!("updating Secret {what}")))?;
        }
    }
    Ok(())
}

/// Sets every webhook's `caBundle` of the configuration to `bundle` where it
/// differs. Returns whether the configuration exists and how many webhooks
/// were patched.
async fn patch_ca_bundle(
    client: &kube::Client,
    config: &BootstrapConfig,
    bundle: &str,
) -> Result<(bool, usize), BootstrapError> {
    let Some(name) = &config.webhook_configuration else {
        return Ok((true, 0));
    };
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let Some(current) = api.get_opt(name).await.map_err(api_error(format!(
        "reading MutatingWebhookConfiguration {name}"
    )))?
    else {
        return Ok((false, 0));
    };
    let stale: Vec<String> = current
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .filter(|w| {
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle.as_bytes())
        })
        .map(|w| w.name)
        .collect();
    if stale.is_empty() {
        return Ok((true, 0));
    }
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
    // Strategic merge: `webhooks` merge by name, so only caBundle changes.
    let patch = serde_json::json!({
        "webhooks": stale.iter().map(|n| serde_json::json!({
            "name": n, "clientConfig": { "caBundle": encoded },
        })).collect::<Vec<_>>(),
    });
    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(api_error(format!("patching the caBundle of {name}")))?;
    Ok((true, stale.len()))
}

/// Sets the APIService's `caBundle` to `bundle` if it differs. Returns
/// whether it exists and whether it was patched.
async fn patch_api_service(
    client: &kube::Client,
    config: &BootstrapConfig,
    bundle: &str,
) -> Result<(bool, bool), BootstrapError> {
    let Some(name) = &config.api_service else {
        return Ok((true, false));
    };
    let api: Api<APIService> = Api::all(client.clone());
    let Some(current) = api
        .get_opt(name)
        .await
        .map_err(api_error(format!("reading APIService {name}")))?
    else {
        return Ok((false, false));
    };
    let same = current
        .spec
        .and_then(|s| s.ca_bundle)
        .is_some_and(|b| b.0 == bundle.as_bytes());
    if same {
        return Ok((true, false));
    }
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
    let patch = serde_json::json!({ "spec": { "caBundle": encoded } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api_error(format!(
            "patching the caBundle of APIService {name}"
        )))?;
    Ok((true, true))
}

fn write_out_dir(dir: &Path, material: &Material) -> Result<(), BootstrapError> {
    let ca = dir.join(CA_CERT_KEY);
    let same = |path: &Path, text: &str| std::fs::read_to_string(path).is_ok_and(|t| t == text);
    if !same(&dir.join(TLS_CERT_KEY), &material.cert)
        || !same(&dir.join(TLS_KEY_KEY), &material.key)
    {
        crate::write_pem_pair(dir, &material.cert, &material.key)?;
    }
    if !same(&ca, &material.ca_bundle) {
        std::fs::write(&ca, &material.ca_bundle)
            .map_err(|source| BootstrapError::Io { path: ca, source })?;
    }
    Ok(())
}

/// Runs [`reconcile`] every `interval` until `stop` resolves. A failed pass
/// is logged and retried sooner (within a minute).
pub async fn watch(
    client: &kube::Client,
    config: &BootstrapConfig,
    interval: Duration,
    stop: impl Future<Output = ()>,
) -> Result<(), BootstrapError> {
    config.validate()?;
    tokio::pin!(stop);
    loop {
        let wait = match reconcile(client, config, OffsetDateTime::now_utc()).await {
            Ok(report) => {
                log_report(config, &report);
                interval
            }
            Err(error) => {
                tracing::warn!(%error, "certificate pass failed; retrying");
                interval.min(Duration::from_secs(60))
            }
        };
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
    }
}
