//! The Helm chart: `helm lint` and `helm template` for the default values and
//! each certificate mode, the objects rendered as the design asks (webhook
//! configuration, Deployments, RBAC, flow control, certificates), the values
//! schema refusing bad values with a clear error, and `helm install` /
//! `helm uninstall` against a real kube-apiserver (tier 1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use koord_queue_tests::install::{self, ALL_KINDS, chart_dir, parse_manifest};
use koord_queue_tests::tools::{self, Tool};
use koord_queue_tests::{ControlPlane, Tier, fixtures};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const NS: &str = "koord-queue";

/// Runs helm (no cluster) with private home directories.
fn helm(args: &[&str]) -> (bool, String) {
    let home = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(tools::path(Tool::Helm).unwrap())
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env("KUBECONFIG", home.path().join("none"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// `helm template koord-queue <chart> -n koord-queue <extra>`: the objects.
fn render(extra: &[&str]) -> Vec<Value> {
    let chart = chart_dir();
    let mut args = vec!["template", "koord-queue", chart.to_str().unwrap(), "-n", NS];
    args.extend_from_slice(extra);
    let (ok, out) = helm(&args);
    assert!(ok, "helm template {extra:?} failed:\n{out}");
    parse_manifest(&out).unwrap()
}

/// `helm template` that must fail; its error text.
fn render_error(extra: &[&str]) -> String {
    let chart = chart_dir();
    let mut args = vec!["template", "koord-queue", chart.to_str().unwrap(), "-n", NS];
    args.extend_from_slice(extra);
    let (ok, out) = helm(&args);
    assert!(!ok, "helm template {extra:?} should fail:\n{out}");
    out
}

fn all_kinds_enabled() -> Vec<String> {
    ALL_KINDS
        .iter()
        .flat_map(|k| ["--set".to_string(), format!("extension.{k}.enable=true")])
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn kinds(docs: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect();
    k.sort();
    k.dedup();
    k
}

fn args_of(deployment: &Value) -> Vec<String> {
    serde_json::from_value(deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone())
        .unwrap()
}

/// Whether a label selector (matchLabels + matchExpressions) selects `labels`.
fn selects(selector: &Value, labels: &BTreeMap<&str, &str>) -> bool {
    if let Some(ml) = selector["matchLabels"].as_object()
        && !ml
            .iter()
            .all(|(k, v)| labels.get(k.as_str()) == v.as_str().as_ref())
    {
        return false;
    }
    selector["matchExpressions"]
        .as_array()
        .map(|e| e.as_slice())
        .unwrap_or_default()
        .iter()
        .all(|e| {
            let key = e["key"].as_str().unwrap();
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(|s| s.as_str()).collect())
                .unwrap_or_default();
            let value = labels.get(key);
            match e["operator"].as_str().unwrap() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => !value.is_some_and(|v| values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                other => panic!("operator {other}"),
            }
        })
}

/// A namespace's labels as the API server sets them (the name label is automatic).
fn namespace_labels(name: &str, opted_in: bool) -> BTreeMap<&str, &str> {
    let mut labels = BTreeMap::from([("kubernetes.io/metadata.name", name)]);
    if opted_in {
        labels.insert("koord-queue/enabled", "true");
    }
    labels
}

/// The chart's appVersion is the release (the workspace version the
/// binaries report in `--version`), and the default tag of all three images.
#[test]
fn the_app_version_is_the_release_and_the_default_image_tag() {
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["appVersion"], version);
    let docs = render(&["--set", "certs.mode=self-signed"]);
    for component in ["webhook", "scheduler", "certs"] {
        let deployment = find(&docs, "Deployment", &format!("koord-queue-{component}"));
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            format!("koord-queue/koord-queue-{component}:{version}"),
            "{component}"
        );
    }
    let docs = render(&["--set", "webhook.image.tag=custom"]);
    let webhook = find(&docs, "Deployment", "koord-queue-webhook");
    assert_eq!(
        webhook["spec"]["template"]["spec"]["containers"][0]["image"],
        "koord-queue/koord-queue-webhook:custom"
    );
}

#[test]
fn helm_lint_passes_for_the_defaults_and_each_cert_mode() {
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    let all = all_kinds_enabled();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let variants: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--set", "certs.mode=self-signed"],
        vec![
            "--set",
            "certs.mode=provided",
            "--set",
            "certs.provided.caBundle=Zm9v",
        ],
        vec!["--set", "serviceMonitor.enabled=true"],
        all,
    ];
    for extra in variants {
        let mut args = vec!["lint", "--strict", chart];
        args.extend_from_slice(&extra);
        let (ok, out) = helm(&args);
        assert!(ok, "helm lint {extra:?} failed:\n{out}");
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

#[test]
fn helm_template_renders_the_generated_crds() {
    let docs = render(&[]);
    let mut crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        docs.iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .map(|d| serde_json::from_value(d.clone()).unwrap())
            .collect();
    let names: Vec<_> = crds
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        [
            "queues.scheduling.x-k8s.io",
            "queueunits.scheduling.x-k8s.io",
            "elasticquotas.scheduling.sigs.k8s.io"
        ]
    );
    // The chart adds its labels and keeps the CRDs on uninstall; the rest is
    // exactly what the types generate.
    for crd in &mut crds {
        let labels = crd.metadata.labels.take().unwrap();
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm");
        let annotations = crd.metadata.annotations.as_mut().unwrap();
        assert_eq!(
            annotations.remove("helm.sh/resource-policy").as_deref(),
            Some("keep")
        );
        if annotations.is_empty() {
            crd.metadata.annotations = None;
        }
    }
    assert_eq!(
        crds,
        koord_queue_api::crd::all(),
        "rendered CRDs differ from the types"
    );

    let docs = render(&["--set", "crds.installElasticQuota=false"]);
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == "elasticquotas.scheduling.sigs.k8s.io")
    );
    let docs = render(&["--set", "crds.install=false", "--set", "crds.keep=false"]);
    let crds: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect();
    assert_eq!(crds.len(), 1, "only the ElasticQuota CRD");
    assert!(crds[0]["metadata"]["annotations"]["helm.sh/resource-policy"].is_null());
}

#[test]
fn the_webhook_configuration_is_as_designed() {
    let docs = render(&[]);
    let config = find(&docs, "MutatingWebhookConfiguration", "koord-queue-webhook");
    assert_eq!(
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "koord-queue/koord-queue-webhook"
    );
    let all_hooks = config["webhooks"].as_array().unwrap();
    let names: Vec<_> = all_hooks
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "jobs.koord-queue.x-k8s.io",
            "job-updates.koord-queue.x-k8s.io",
            "pods.koord-queue.x-k8s.io",
            "pod-updates.koord-queue.x-k8s.io"
        ],
        "creates, and updates not by the scheduler, of jobs; and of pods, which every \
         opted-in namespace sends (webhook.reviewPods), whatever kinds are queued"
    );
    for hook in &all_hooks[2..] {
        assert!(selects(
            &hook["namespaceSelector"],
            &namespace_labels("team-a", true)
        ));
        assert!(!selects(
            &hook["namespaceSelector"],
            &namespace_labels("team-a", false)
        ));
    }
    let webhook = find(&docs, "Deployment", "koord-queue-webhook");
    assert!(args_of(webhook).contains(&"--review-pods".to_string()));
    let hooks = &all_hooks[..2];
    for (hook, operation) in hooks.iter().zip(["CREATE", "UPDATE"]) {
        assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
        assert_eq!(hook["sideEffects"], "NoneOnDryRun");
        assert_eq!(hook["matchPolicy"], "Equivalent");
        assert_eq!(hook["timeoutSeconds"], 10);
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(
            hook["clientConfig"]["service"],
            json!({ "name": "koord-queue-webhook", "namespace": NS, "path": "/mutate", "port": 443 })
        );
        assert!(
            hook["clientConfig"]["caBundle"].is_null(),
            "injected by cert-manager"
        );
        assert_eq!(
            hook["rules"],
            json!([{
                "apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"],
                "operations": [operation], "scope": "Namespaced",
            }]),
            "by default only batch/v1 Jobs"
        );
        // The opt-in label selects; the system namespaces and the release's
        // own never match, whatever the selector.
        let sel = &hook["namespaceSelector"];
        assert!(selects(sel, &namespace_labels("team-a", true)));
        assert!(!selects(sel, &namespace_labels("team-a", false)));
        for never in ["kube-system", "kube-public", "kube-node-lease", NS] {
            assert!(!selects(sel, &namespace_labels(never, true)), "{never}");
        }
    }
    // Creates carry no condition (the API server would convert every job
    // for it); the scheduler's own updates skip the webhook (it allows
    // them all).
    assert!(hooks[0]["matchConditions"].is_null());
    assert_eq!(
        hooks[1]["matchConditions"],
        json!([{
            "name": "not-by-the-scheduler",
            "expression": format!(
                "request.userInfo.username != 'system:serviceaccount:{NS}:koord-queue-scheduler'"
            ),
        }])
    );

    let docs = render(&[
        // Clearing the opt-in label selects every namespace…
        "--set",
        "webhook.namespaceSelector.matchLabels=null",
        "--set",
        "webhook.failurePolicy=Ignore",
        "--set",
        "webhook.timeoutSeconds=5",
    ]);
    let config = find(&docs, "MutatingWebhookConfiguration", "koord-queue-webhook");
    for hook in config["webhooks"].as_array().unwrap() {
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(hook["timeoutSeconds"], 5);
        let sel = &hook["namespaceSelector"];
        assert!(
            selects(sel, &namespace_labels("anything", false)),
            "no label needed…"
        );
        for never in ["kube-system", "kube-public", "kube-node-lease", NS] {
            assert!(
                !selects(sel, &namespace_labels(never, true)),
                "…but never {never}"
            );
        }
    }
    // The webhook's own time budget stays under the API server's.
    let webhook = find(&docs, "Deployment", "koord-queue-webhook");
    assert!(args_of(webhook).contains(&"--review-timeout=4000ms".to_string()));
}

#[test]
fn every_enabled_kind_gets_a_rule_the_scheduler_rbac_and_the_flags() {
    let all = all_kinds_enabled();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let docs = render(&all);
    let hooks = &find(&docs, "MutatingWebhookConfiguration", "koord-queue-webhook")["webhooks"];
    let kinds: Vec<(String, String, String)> = koord_queue_api::jobs::all()
        .iter()
        .map(|a| {
            let k = a.kind();
            (k.group.into(), k.version.into(), k.plural.into())
        })
        .collect();
    let is_pod = |(g, _, plural): &(String, String, String)| g.is_empty() && plural == "pods";
    let hooks = hooks.as_array().unwrap();
    let names: Vec<&str> = hooks.iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "jobs.koord-queue.x-k8s.io",
            "job-updates.koord-queue.x-k8s.io",
            "pods.koord-queue.x-k8s.io",
            "pod-updates.koord-queue.x-k8s.io"
        ]
    );
    // Pods have hooks of their own, selecting every opted-in namespace
    // (webhook.reviewPods); without it only the namespaces that queue pods,
    // so that a namespace queueing jobs sends no review per pod.
    for hook in &hooks[2..] {
        let sel = &hook["namespaceSelector"];
        assert!(
            selects(sel, &namespace_labels("team-a", true)),
            "{}",
            hook["name"]
        );
    }
    let mut without = all.clone();
    without.extend(["--set", "webhook.reviewPods=false"]);
    let docs_without = render(&without);
    let hooks_without = &find(
        &docs_without,
        "MutatingWebhookConfiguration",
        "koord-queue-webhook",
    )["webhooks"];
    for hook in &hooks_without.as_array().unwrap()[2..] {
        let sel = &hook["namespaceSelector"];
        let mut labels = namespace_labels("team-a", true);
        assert!(!selects(sel, &labels), "{}", hook["name"]);
        labels.insert("koord-queue/queue-pods", "true");
        assert!(selects(sel, &labels), "{}", hook["name"]);
    }
    assert!(hooks[2]["matchConditions"].is_null());
    assert_eq!(hooks[3]["matchConditions"], hooks[1]["matchConditions"]);
    let hook_kinds = [false, false, true, true];
    for ((hook, operation), pods) in hooks
        .iter()
        .zip(["CREATE", "UPDATE", "CREATE", "UPDATE"])
        .zip(hook_kinds)
    {
        let mut expected: Vec<_> = kinds
            .iter()
            .filter(|k| is_pod(k) == pods)
            .cloned()
            .collect();
        if operation == "UPDATE" {
            // Updates through a CRD's /scale, and a Pod's in-place
            // resize, are reviewed too.
            for (g, v, plural) in expected.clone() {
                if koord_queue_tests::webhook::SCALABLE.contains(&plural.as_str()) {
                    expected.push((g.clone(), v.clone(), format!("{plural}/scale")));
                }
                if plural == "pods" {
                    expected.push((g.clone(), v.clone(), "pods/resize".into()));
                }
            }
        }
        expected.sort();
        let mut registered: Vec<(String, String, String)> = Vec::new();
        for rule in hook["rules"].as_array().unwrap() {
            assert_eq!(rule["operations"], json!([operation]));
            for r in rule["resources"].as_array().unwrap() {
                registered.push((
                    rule["apiGroups"][0].as_str().unwrap().into(),
                    rule["apiVersions"][0].as_str().unwrap().into(),
                    r.as_str().unwrap().into(),
                ));
            }
        }
        registered.sort();
        assert_eq!(
            registered, expected,
            "{operation}: one rule per adapter of the api crate"
        );
    }

    let kinds_flag = format!("--enabled-kinds={}", ALL_KINDS.join(","));
    let webhook_args = args_of(find(&docs, "Deployment", "koord-queue-webhook"));
    let scheduler_args = args_of(find(&docs, "Deployment", "koord-queue-scheduler"));
    assert!(webhook_args.contains(&kinds_flag), "{webhook_args:?}");
    assert!(scheduler_args.contains(&kinds_flag), "{scheduler_args:?}");

    // The flags are the binaries' own: they parse.
    let tls = Path::new("/tmp");
    let w = install::webhook_args(&webhook_args, "127.0.0.1:0".parse().unwrap(), tls).unwrap();
    assert_eq!(w.enabled_kinds, ALL_KINDS);
    assert_eq!(
        w.scheduler_user,
        "system:serviceaccount:koord-queue:koord-queue-scheduler"
    );
    let s = install::scheduler_args(&scheduler_args, "pod-0", tls).unwrap();
    assert_eq!(s.enabled_kinds, ALL_KINDS);
    assert_eq!(s.namespace, NS);
    assert_eq!(s.lease_name, "koord-queue-scheduler");
    assert_eq!(s.identity.as_deref(), Some("pod-0"));

    // The scheduler may follow and release every enabled kind; a released
    // pod cannot be gated again, so sending one back deletes it.
    let role = find(&docs, "ClusterRole", "koord-queue-scheduler");
    for kind @ (group, _, plural) in &kinds {
        let rule = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["apiGroups"][0] == group.as_str()
                    && r["verbs"].as_array().unwrap().iter().any(|v| v == "patch")
                    && r["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|x| x == plural.as_str())
            })
            .unwrap_or_else(|| panic!("no scheduler rule for {group}/{plural}"));
        let verbs = if is_pod(kind) {
            json!(["get", "list", "watch", "patch", "delete"])
        } else {
            json!(["get", "list", "watch", "patch"])
        };
        assert_eq!(rule["verbs"], verbs);
    }
}

#[test]
fn the_deployments_are_as_designed() {
    let docs = render(&[]);
    let webhook = find(&docs, "Deployment", "koord-queue-webhook");
    assert_eq!(webhook["spec"]["replicas"], 2);
    let pod = &webhook["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "koord-queue-webhook");
    assert!(
        pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
            ["topologyKey"]
            == "kubernetes.io/hostname"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "koord-queue/koord-queue-webhook:0.1.0");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["resources"]["requests"]["cpu"].is_string());
    let ports: BTreeMap<String, i64> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().into(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        BTreeMap::from([("admin".into(), 9090), ("https".into(), 9443)])
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({ "path": "/livez", "port": "admin" })
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({ "path": "/readyz", "port": "admin" })
    );
    assert_eq!(
        c["volumeMounts"][0],
        json!({ "name": "tls", "mountPath": "/etc/koord-queue/tls", "readOnly": true })
    );
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "koord-queue-webhook-tls"
    );
    let args = args_of(webhook);
    assert!(args.contains(&"--tls-dir=/etc/koord-queue/tls".to_string()));
    assert!(args.contains(&"--listen-addr=0.0.0.0:9443".to_string()));
    assert!(args.contains(&"--admin-addr=0.0.0.0:9090".to_string()));

    let service = find(&docs, "Service", "koord-queue-webhook");
    assert_eq!(
        service["spec"]["ports"],
        json!([{ "name": "https", "port": 443, "targetPort": "https", "protocol": "TCP" }])
    );
    let labels = webhook["spec"]["template"]["metadata"]["labels"].clone();
    assert_eq!(service["spec"]["selector"], labels);
    let pdb = find(&docs, "PodDisruptionBudget", "koord-queue-webhook");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], labels);

    let scheduler = find(&docs, "Deployment", "koord-queue-scheduler");
    assert_eq!(scheduler["spec"]["replicas"], 2);
    let pod = &scheduler["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "koord-queue-scheduler");
    let c = &pod["containers"][0];
    assert_eq!(
        c["env"][0],
        json!({ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } })
    );
    let args = args_of(scheduler);
    for want in [
        "--identity=$(POD_NAME)",
        "--lease-name=koord-queue-scheduler",
        "--namespace=koord-queue",
        "--config=/etc/koord-queue/config/config.yaml",
    ] {
        assert!(args.contains(&want.to_string()), "{want} in {args:?}");
    }
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/etc/koord-queue/config");
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        "koord-queue-scheduler-config"
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    // The configuration in the ConfigMap is one the scheduler accepts.
    let config = find(&docs, "ConfigMap", "koord-queue-scheduler-config")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    let core = koord_queue_scheduler::core::Core::from_yaml(config).unwrap();
    assert_eq!(core.plugin_names(), ["Priority", "ElasticQuota"]);

    let scheduler_role = find(&docs, "ClusterRole", "koord-queue-scheduler");
    assert!(
        !scheduler_role.to_string().contains("resourcequotas"),
        "no ResourceQuota rights without the plugin"
    );
    let docs_rq = render(&[
        "--set-json",
        r#"scheduler.config={"plugins":[{"name":"Priority"},{"name":"ElasticQuota"},{"name":"ResourceQuota"}]}"#,
    ]);
    let role = find(&docs_rq, "ClusterRole", "koord-queue-scheduler");
    assert!(
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == json!(["resourcequotas"])
                && r["verbs"] == json!(["list", "watch"])),
        "{role}"
    );
    let config = find(&docs_rq, "ConfigMap", "koord-queue-scheduler-config")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    assert_eq!(
        koord_queue_scheduler::core::Core::from_yaml(config)
            .unwrap()
            .plugin_names(),
        ["Priority", "ElasticQuota", "ResourceQuota"]
    );

    // Another release gets its own Lease; replicas, anti-affinity, PDB follow values.
    let chart = chart_dir();
    let (ok, out) = helm(&[
        "template",
        "team-x",
        chart.to_str().unwrap(),
        "-n",
        NS,
        "--set",
        "scheduler.replicas=1",
        "--set",
        "webhook.replicas=1",
        "--set",
        "webhook.podAntiAffinity=hard",
    ]);
    assert!(ok, "{out}");
    let docs = parse_manifest(&out).unwrap();
    let scheduler = find(&docs, "Deployment", "team-x-koord-queue-scheduler");
    assert_eq!(scheduler["spec"]["replicas"], 1);
    assert!(args_of(scheduler).contains(&"--lease-name=team-x-scheduler".to_string()));
    let webhook = find(&docs, "Deployment", "team-x-koord-queue-webhook");
    assert!(
        !webhook["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_null()
    );
    assert!(
        !kinds(&docs).contains(&"PodDisruptionBudget".to_string()),
        "no PDB for one replica"
    );
}

#[test]
fn flow_control_gives_the_webhook_its_own_seats_and_service_monitors_are_optional() {
    let docs = render(&[]);
    let plc = find(&docs, "PriorityLevelConfiguration", "koord-queue-webhook");
    assert_eq!(plc["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
    assert_eq!(plc["spec"]["type"], "Limited");
    assert_eq!(plc["spec"]["limited"]["lendablePercent"], 0);
    let fs = find(&docs, "FlowSchema", "koord-queue-webhook");
    assert_eq!(
        fs["spec"]["priorityLevelConfiguration"]["name"],
        "koord-queue-webhook"
    );
    assert_eq!(
        fs["spec"]["rules"][0]["subjects"],
        json!([{ "kind": "ServiceAccount", "serviceAccount": { "name": "koord-queue-webhook", "namespace": NS } }])
    );
    assert!(
        !kinds(&docs).contains(&"ServiceMonitor".to_string()),
        "off by default"
    );

    let docs = render(&[
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "webhook.flowControl.enabled=false",
    ]);
    assert!(!kinds(&docs).contains(&"FlowSchema".to_string()));
    let monitors: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceMonitor")
        .collect();
    assert_eq!(monitors.len(), 2, "webhook and scheduler");
    let svc = find(&docs, "Service", "koord-queue-scheduler-metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "admin");
}

#[test]
fn each_cert_mode_renders_its_certificate_objects() {
    const CM: [&str; 2] = ["Certificate", "Issuer"];
    // cert-manager (default): a private CA chain and the serving certificate.
    let docs = render(&[]);
    let ca = find(&docs, "Certificate", "koord-queue-ca");
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(ca["spec"]["issuerRef"]["name"], "koord-queue-selfsigned");
    assert_eq!(
        find(&docs, "Issuer", "koord-queue-selfsigned")["spec"]["selfSigned"],
        json!({})
    );
    assert_eq!(
        find(&docs, "Issuer", "koord-queue-ca")["spec"]["ca"]["secretName"],
        "koord-queue-ca"
    );
    let cert = find(&docs, "Certificate", "koord-queue-webhook");
    assert_eq!(cert["spec"]["secretName"], "koord-queue-webhook-tls");
    assert_eq!(cert["spec"]["issuerRef"]["name"], "koord-queue-ca");
    assert_eq!(
        cert["spec"]["dnsNames"],
        json!([
            "koord-queue-webhook",
            "koord-queue-webhook.koord-queue",
            "koord-queue-webhook.koord-queue.svc",
            "koord-queue-webhook.koord-queue.svc.cluster.local"
        ])
    );
    // The visibility API's certificate from the same issuer, injected into
    // its APIService.
    let visibility = find(&docs, "Certificate", "koord-queue-visibility");
    assert_eq!(
        visibility["spec"]["secretName"],
        "koord-queue-visibility-tls"
    );
    assert_eq!(visibility["spec"]["issuerRef"]["name"], "koord-queue-ca");
    assert_eq!(
        visibility["spec"]["dnsNames"][2],
        "koord-queue-visibility.koord-queue.svc"
    );
    let api_service = find(&docs, "APIService", "v1alpha1.visibility.koord-queue.io");
    assert_eq!(
        api_service["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "koord-queue/koord-queue-visibility"
    );
    assert_eq!(
        api_service["spec"]["service"]["name"],
        "koord-queue-visibility"
    );
    // …or a given issuer.
    let docs = render(&[
        "--set",
        "certs.certManager.issuerRef.name=corp-ca",
        "--set",
        "certs.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    assert!(!kinds(&docs).contains(&"Issuer".to_string()));
    assert_eq!(
        find(&docs, "Certificate", "koord-queue-webhook")["spec"]["issuerRef"],
        json!({ "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io" })
    );
    // kind and group are written even when not given: without cert-manager's
    // webhook nobody defaults them. Extra names cover a webhook called by URL.
    let docs = render(&[
        "--set",
        "certs.certManager.issuerRef.name=corp-ca",
        "--set-json",
        r#"certs.certManager.ipAddresses=["127.0.0.1"]"#,
        "--set-json",
        r#"certs.certManager.extraDnsNames=["webhook.example"]"#,
    ]);
    let cert = find(&docs, "Certificate", "koord-queue-webhook");
    assert_eq!(
        cert["spec"]["issuerRef"],
        json!({ "name": "corp-ca", "kind": "Issuer", "group": "cert-manager.io" })
    );
    assert_eq!(cert["spec"]["ipAddresses"], json!(["127.0.0.1"]));
    assert_eq!(cert["spec"]["dnsNames"][4], "webhook.example");

    // self-signed: the bootstrap Deployment with its own narrow RBAC.
    let docs = render(&["--set", "certs.mode=self-signed"]);
    for k in CM {
        assert!(!kinds(&docs).contains(&k.to_string()), "no {k}");
    }
    let config = find(&docs, "MutatingWebhookConfiguration", "koord-queue-webhook");
    assert!(config["metadata"]["annotations"].is_null());
    assert!(
        config["webhooks"][0]["clientConfig"]["caBundle"].is_null(),
        "patched by the bootstrap"
    );
    let bootstrap = find(&docs, "Deployment", "koord-queue-certs");
    assert_eq!(bootstrap["spec"]["replicas"], 1);
    assert_eq!(
        bootstrap["spec"]["template"]["spec"]["serviceAccountName"],
        "koord-queue-certs"
    );
    let args = args_of(bootstrap);
    for want in [
        "bootstrap",
        "--namespace=koord-queue",
        "--secret=koord-queue-webhook-tls",
        "--webhook-configuration=koord-queue-webhook",
        "--service=koord-queue-webhook",
        "--watch",
    ] {
        assert!(args.contains(&want.to_string()), "{want} in {args:?}");
    }
    let role = find(&docs, "Role", "koord-queue-certs");
    assert_eq!(
        role["rules"],
        json!([
            { "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] },
            { "apiGroups": [""], "resources": ["secrets"],
              "resourceNames": ["koord-queue-webhook-tls", "koord-queue-visibility-tls"], "verbs": ["get", "update"] },
        ])
    );
    assert_eq!(
        find(&docs, "ClusterRole", "koord-queue-certs")["rules"],
        json!([{ "apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
                 "resourceNames": ["koord-queue-webhook"], "verbs": ["get", "patch"] },
               { "apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"],
                 "resourceNames": ["v1alpha1.visibility.koord-queue.io"], "verbs": ["get", "patch"] }])
    );
    // The visibility API's certificate: a second bootstrap, its own Secret,
    // the APIService's caBundle.
    let containers = bootstrap["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let visibility = containers
        .iter()
        .find(|c| c["name"] == "bootstrap-visibility")
        .expect("a bootstrap of the visibility certificate");
    let args: Vec<&str> = visibility["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for want in [
        "--secret=koord-queue-visibility-tls",
        "--api-service=v1alpha1.visibility.koord-queue.io",
        "--service=koord-queue-visibility",
    ] {
        assert!(args.contains(&want), "{want} in {args:?}");
    }
    let api_service = find(&docs, "APIService", "v1alpha1.visibility.koord-queue.io");
    assert!(
        api_service["spec"]["caBundle"].is_null(),
        "patched by the bootstrap"
    );

    // provided: the user's Secret and CA bundle (PEM or base64).
    use base64::Engine;
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
    for given in [pem.to_string(), b64.clone()] {
        let docs = render(&[
            "--set",
            "certs.mode=provided",
            "--set",
            "certs.secretName=my-tls",
            "--set-string",
            &format!("certs.provided.caBundle={given}"),
        ]);
        for k in CM {
            assert!(!kinds(&docs).contains(&k.to_string()), "no {k}");
        }
        let config = find(&docs, "MutatingWebhookConfiguration", "koord-queue-webhook");
        for hook in config["webhooks"].as_array().unwrap() {
            assert_eq!(hook["clientConfig"]["caBundle"], b64.as_str());
        }
        let webhook = find(&docs, "Deployment", "koord-queue-webhook");
        assert_eq!(
            webhook["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
            "my-tls"
        );
        let api_service = find(&docs, "APIService", "v1alpha1.visibility.koord-queue.io");
        assert_eq!(api_service["spec"]["caBundle"], b64.as_str());
    }
    let error = render_error(&["--set", "certs.mode=provided"]);
    assert!(error.contains("/certs/provided/caBundle"), "{error}");
}

#[test]
fn the_schema_rejects_invalid_values_with_a_clear_error() {
    for (set, expect) in [
        (
            "webhook.failurePolicy=Sometimes",
            "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'",
        ),
        (
            "webhook.replicas=-1",
            "at '/webhook/replicas': minimum: got -1, want 0",
        ),
        ("scheduler.replicas=-2", "at '/scheduler/replicas': minimum"),
        (
            "webhook.timeoutSeconds=31",
            "at '/webhook/timeoutSeconds': maximum: got 31, want 30",
        ),
        (
            "webhook.timeoutSeconds=0",
            "at '/webhook/timeoutSeconds': minimum",
        ),
        (
            "certs.mode=sometimes",
            "at '/certs/mode': value must be one of 'cert-manager', 'self-signed', 'provided'",
        ),
        (
            "webhook.image.repository=",
            "at '/webhook/image/repository'",
        ),
        (
            "scheduler.image.pullPolicy=Sometimes",
            "at '/scheduler/image/pullPolicy'",
        ),
        ("webhook.url=http://insecure", "at '/webhook/url'"),
        (
            "scheduler.leaderElection.leaseDuration=soon",
            "at '/scheduler/leaderElection/leaseDuration'",
        ),
        (
            "scheduler.config.plugins[0].name=Fifo",
            "at '/scheduler/config/plugins/0/name'",
        ),
        (
            "webhok.replicas=2",
            "additional properties 'webhok' not allowed",
        ),
    ] {
        let error = render_error(&["--set", set]);
        assert!(
            error.contains("values don't meet the specifications of the schema"),
            "{set}: {error}"
        );
        assert!(
            error.contains(expect),
            "{set}: wanted {expect:?} in:\n{error}"
        );
    }
    let error = render_error(&["--set", "webhook.image=null"]);
    assert!(error.contains("image"), "{error}");
    let error = render_error(&["--set", "extension.batchjob.enable=false"]);
    assert!(error.contains("no job kind is enabled"), "{error}");
}

#[test]
fn the_webhook_ships_a_network_policy_and_can_require_the_api_servers_certificate() {
    let docs = render(&[]);
    let policy = find(&docs, "NetworkPolicy", "koord-queue-webhook");
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(
        ingress[0]["ports"],
        json!([{ "port": 9443, "protocol": "TCP" }])
    );
    assert_eq!(
        ingress[0]["from"],
        json!([{ "ipBlock": { "cidr": "0.0.0.0/0" } }])
    );
    assert_eq!(
        ingress[1]["ports"],
        json!([{ "port": 9090, "protocol": "TCP" }])
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    // The source is selectable; the policy can be switched off.
    let docs = render(&[
        "--set-json",
        r#"webhook.networkPolicy.admissionFrom=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]"#,
    ]);
    let policy = find(&docs, "NetworkPolicy", "koord-queue-webhook");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"],
        "10.0.0.0/24"
    );
    let docs = render(&["--set", "webhook.networkPolicy.enabled=false"]);
    assert!(!kinds(&docs).contains(&"NetworkPolicy".to_string()));

    // Client authentication: the CA is mounted and passed; without one the
    // install stops with a message.
    assert!(
        !args_of(find(&render(&[]), "Deployment", "koord-queue-webhook"))
            .iter()
            .any(|a| a.starts_with("--client-ca-file"))
    );
    let docs = render(&[
        "--set",
        "webhook.clientAuth.enabled=true",
        "--set-string",
        "webhook.clientAuth.caBundle=-----BEGIN CERTIFICATE-----",
    ]);
    let webhook = find(&docs, "Deployment", "koord-queue-webhook");
    assert!(
        args_of(webhook)
            .contains(&"--client-ca-file=/etc/koord-queue/client-ca/ca.crt".to_string())
    );
    let ca = find(&docs, "ConfigMap", "koord-queue-webhook-client-ca");
    assert!(
        ca["data"]["ca.crt"]
            .as_str()
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    let error = render_error(&["--set", "webhook.clientAuth.enabled=true"]);
    assert!(error.contains("webhook.clientAuth.caBundle"), "{error}");
}

#[test]
fn neither_component_may_read_secrets_and_the_webhook_cannot_change_jobs() {
    let all = all_kinds_enabled();
    let mut args: Vec<&str> = all.iter().map(String::as_str).collect();
    args.extend(["--set", "certs.mode=self-signed"]);
    let docs = render(&args);
    for doc in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
    {
        let name = doc["metadata"]["name"].as_str().unwrap();
        for rule in doc["rules"].as_array().unwrap() {
            let resources: Vec<&str> = rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            assert!(
                !verbs.contains(&"*") && !resources.contains(&"*"),
                "{name}: wildcard in {rule}"
            );
            if resources.contains(&"secrets") {
                assert_eq!(
                    name, "koord-queue-certs",
                    "only the bootstrap touches Secrets"
                );
                assert!(
                    verbs == ["create"]
                        || rule["resourceNames"]
                            == json!(["koord-queue-webhook-tls", "koord-queue-visibility-tls"]),
                    "{name}: {rule}"
                );
            }
        }
    }
    let webhook = find(&docs, "ClusterRole", "koord-queue-webhook");
    let job_resources: Vec<&str> = koord_queue_api::jobs::all()
        .iter()
        .map(|a| a.kind().plural)
        .collect();
    for rule in webhook["rules"].as_array().unwrap() {
        for r in rule["resources"].as_array().unwrap() {
            // It reads jobs back (a review proves nothing) and counts the
            // pods a unit pays for; it never changes them.
            let reads = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v == "get" || v == "list");
            assert!(
                !job_resources.contains(&r.as_str().unwrap()) || reads,
                "webhook may change jobs: {rule}"
            );
        }
    }
    assert_eq!(
        webhook["rules"][0],
        json!({ "apiGroups": ["scheduling.x-k8s.io"], "resources": ["queueunits"], "verbs": ["create", "get"] })
    );
}

/// A control plane of this test binary's own, without Koord-Queue's CRDs
/// (the chart installs them) and with minimal cert-manager CRDs.
async fn cluster() -> &'static ControlPlane {
    static CP: OnceCell<ControlPlane> = OnceCell::const_new();
    CP.get_or_init(|| async {
        koord_queue_tests::init_tracing();
        let cp = ControlPlane::start(Tier::One).await.unwrap();
        let client = cp.client().await.unwrap();
        fixtures::apply_crds(&client, &install::cert_manager_crds().unwrap())
            .await
            .unwrap();
        cp
    })
    .await
}

/// Whether the object of a manifest document exists in the cluster.
async fn exists(client: &kube::Client, doc: &Value) -> bool {
    use kube::api::{Api, DynamicObject, GroupVersionKind};
    let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().unwrap());
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let name = doc["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            doc["metadata"]["namespace"].as_str().unwrap_or(NS),
            &resource,
        ),
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    api.get_opt(name).await.unwrap().is_some()
}

/// Installs, checks every object of the release exists, uninstalls, checks
/// every object is gone (the CRDs are kept on purpose).
async fn install_and_uninstall(
    cp: &ControlPlane,
    release: &str,
    namespace: &str,
    values: Value,
) -> Vec<Value> {
    let client = cp.client().await.unwrap();
    let home = cp.dir().join("helm");
    let values_file = cp.dir().join(format!("{release}-values.yaml"));
    std::fs::write(&values_file, serde_yaml::to_string(&values).unwrap()).unwrap();
    let chart = chart_dir();
    let kubeconfig = Some(cp.kubeconfig());
    install::helm_ok(
        &home,
        kubeconfig,
        &[
            "install",
            release,
            chart.to_str().unwrap(),
            "-n",
            namespace,
            "--create-namespace",
            "-f",
            values_file.to_str().unwrap(),
        ],
    )
    .await
    .unwrap();
    let manifest = install::helm_ok(
        &home,
        kubeconfig,
        &["get", "manifest", release, "-n", namespace],
    )
    .await
    .unwrap();
    let docs = parse_manifest(&manifest).unwrap();
    for doc in &docs {
        assert!(
            exists(&client, doc).await,
            "{release}: {} {} not created",
            doc["kind"],
            doc["metadata"]["name"]
        );
    }
    let status = install::helm_ok(&home, kubeconfig, &["status", release, "-n", namespace])
        .await
        .unwrap();
    assert!(status.contains("STATUS: deployed"), "{status}");

    install::helm_ok(&home, kubeconfig, &["uninstall", release, "-n", namespace])
        .await
        .unwrap();
    for doc in &docs {
        let kept = doc["kind"] == "CustomResourceDefinition";
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        let client = client.clone();
        let doc = doc.clone();
        fixtures::eventually(std::time::Duration::from_secs(20), move || {
            let client = client.clone();
            let doc = doc.clone();
            async move { Ok(exists(&client, &doc).await == kept) }
        })
        .await
        .unwrap_or_else(|_| panic!("{release}: {name} (kept: {kept}) after uninstall"));
    }
    docs
}

#[tokio::test]
async fn helm_install_creates_every_object_and_uninstall_removes_them() {
    let cp = cluster().await;
    let kinds_of = |docs: &[Value]| kinds(docs);

    // cert-manager (default values).
    let docs = install_and_uninstall(cp, "koord-queue", NS, json!({})).await;
    let k = kinds_of(&docs);
    for want in [
        "Certificate",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "CustomResourceDefinition",
        "Deployment",
        "FlowSchema",
        "Issuer",
        "MutatingWebhookConfiguration",
        "PodDisruptionBudget",
        "PriorityLevelConfiguration",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "APIService",
    ] {
        assert!(k.contains(&want.to_string()), "{want} installed: {k:?}");
    }
    assert_eq!(
        docs.iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .count(),
        3
    );

    // self-signed: the kept CRDs are adopted again by the same release.
    let docs = install_and_uninstall(
        cp,
        "koord-queue",
        NS,
        json!({ "certs": { "mode": "self-signed" } }),
    )
    .await;
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "koord-queue-certs")
    );
    assert!(!kinds_of(&docs).contains(&"Certificate".to_string()));

    // provided, with every kind.
    let extension: serde_json::Map<String, Value> = ALL_KINDS
        .iter()
        .map(|k| (k.to_string(), json!({ "enable": true })))
        .collect();
    let docs = install_and_uninstall(
        cp,
        "koord-queue",
        NS,
        json!({
            "extension": extension,
            "certs": { "mode": "provided", "secretName": "mine", "provided": { "caBundle": cp.pki().ca.cert_pem() } },
        }),
    )
    .await;
    assert!(!kinds_of(&docs).contains(&"Certificate".to_string()));

    // A second release next to the first: its own cluster-scoped names, and
    // the ElasticQuota CRD owned by the first release is left alone.
    let first = install::LocalInstall {
        release: "koord-queue".into(),
        namespace: NS.into(),
        webhook_url: "https://127.0.0.1:1/mutate".into(),
        ca_pem: cp.pki().ca.cert_pem().into(),
        install_crds: true,
        visibility_port: None,
    };
    first.install(cp).await.unwrap();
    let docs = install_and_uninstall(
        cp,
        "team-x",
        "team-x-system",
        json!({ "crds": { "install": false } }),
    )
    .await;
    assert!(
        !kinds_of(&docs).contains(&"CustomResourceDefinition".to_string()),
        "Koord-Queue's CRDs stay with their owner"
    );
    assert!(
        docs.iter()
            .any(|d| d["metadata"]["name"] == "team-x-koord-queue-webhook"
                && d["kind"] == "MutatingWebhookConfiguration")
    );
    let home = cp.dir().join("helm");
    install::helm_ok(
        &home,
        Some(cp.kubeconfig()),
        &["uninstall", "koord-queue", "-n", NS],
    )
    .await
    .unwrap();
}

/// The schema is enforced at install too: nothing is created.
#[tokio::test]
async fn an_invalid_value_fails_the_install_with_a_clear_error() {
    let cp = cluster().await;
    let home = cp.dir().join("helm-invalid");
    let chart = chart_dir();
    let (ok, out) = install::helm(
        &home,
        Some(cp.kubeconfig()),
        &[
            "install",
            "invalid",
            chart.to_str().unwrap(),
            "-n",
            "invalid-system",
            "--create-namespace",
            "--set",
            "webhook.failurePolicy=Sometimes",
            "--set",
            "webhook.replicas=-1",
        ],
    )
    .await
    .unwrap();
    assert!(!ok, "{out}");
    assert!(
        out.contains("at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"),
        "{out}"
    );
    assert!(
        out.contains("at '/webhook/replicas': minimum: got -1, want 0"),
        "{out}"
    );
    let client = cp.client().await.unwrap();
    let configs = kube::Api::<
        k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
    >::all(client)
    .get_opt("invalid-koord-queue-webhook")
    .await
    .unwrap();
    assert!(configs.is_none(), "nothing installed");
}

/// The bootstrap's identity in self-signed mode may touch only its Secret
/// and its webhook configuration.
#[tokio::test]
async fn the_certificate_bootstrap_identity_is_narrow() {
    let cp = cluster().await;
    let home = cp.dir().join("helm-narrow");
    let chart = chart_dir();
    install::helm_ok(
        &home,
        Some(cp.kubeconfig()),
        &[
            "install",
            "narrow",
            chart.to_str().unwrap(),
            "-n",
            "narrow-system",
            "--create-namespace",
            "--set",
            "certs.mode=self-signed",
            // One release per cluster serves the visibility API (its
            // APIService is cluster-wide); the main install test has it.
            "--set",
            "visibility.enable=false",
            "--set",
            "crds.install=false",
            "--set",
            "crds.installElasticQuota=false",
        ],
    )
    .await
    .unwrap();
    let user = "system:serviceaccount:narrow-system:narrow-koord-queue-certs";
    for (args, allowed) in [
        (
            vec![
                "get",
                "secret/narrow-koord-queue-webhook-tls",
                "-n",
                "narrow-system",
            ],
            true,
        ),
        (
            vec![
                "update",
                "secret/narrow-koord-queue-webhook-tls",
                "-n",
                "narrow-system",
            ],
            true,
        ),
        (vec!["create", "secrets", "-n", "narrow-system"], true),
        (
            vec![
                "patch",
                "mutatingwebhookconfiguration/narrow-koord-queue-webhook",
            ],
            true,
        ),
        (vec!["get", "secret/other", "-n", "narrow-system"], false),
        (vec!["list", "secrets", "-n", "narrow-system"], false),
        (vec!["list", "secrets", "--all-namespaces"], false),
        (
            vec![
                "get",
                "secret/narrow-koord-queue-webhook-tls",
                "-n",
                "kube-system",
            ],
            false,
        ),
        (vec!["patch", "mutatingwebhookconfiguration/other"], false),
        (
            vec!["create", "queueunits.scheduling.x-k8s.io", "-n", "default"],
            false,
        ),
    ] {
        assert_eq!(
            install::can_i(cp, user, &args).await.unwrap(),
            allowed,
            "{user} {args:?}"
        );
    }
    install::helm_ok(
        &home,
        Some(cp.kubeconfig()),
        &["uninstall", "narrow", "-n", "narrow-system"],
    )
    .await
    .unwrap();
}

/// The objects of component `component` among `docs`.
fn of_component<'a>(docs: &'a [Value], component: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == json!(component))
        .collect()
}

#[test]
fn the_dashboard_is_off_by_default_and_has_no_rights_of_its_own() {
    assert!(of_component(&render(&[]), "dashboard").is_empty());

    let docs = render(&["--set", "dashboard.enable=true"]);
    let mut kinds: Vec<&str> = of_component(&docs, "dashboard")
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["Deployment", "Service", "ServiceAccount"]);
    let name = "koord-queue-dashboard";
    let sa = find(&docs, "ServiceAccount", name);
    assert_eq!(sa["automountServiceAccountToken"], false);
    // Bound to nothing: no binding in the chart names its ServiceAccount.
    for binding in docs
        .iter()
        .filter(|d| d["kind"] == "RoleBinding" || d["kind"] == "ClusterRoleBinding")
    {
        for subject in binding["subjects"].as_array().into_iter().flatten() {
            assert_ne!(subject["name"], json!(name), "{binding}");
        }
    }
    let deployment = find(&docs, "Deployment", name);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], json!(name));
    assert_eq!(pod["automountServiceAccountToken"], false);
    let args = args_of(deployment);
    for expected in [
        "--addr=0.0.0.0:8080",
        "--server=https://kubernetes.default.svc",
        "--ca-file=/etc/koord-queue/kube-ca/ca.crt",
        "--refresh=5s",
        "--session-lifetime=8h",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "{expected} not in {args:?}"
        );
    }
    assert!(!args.iter().any(|a| a == "--proxy-auth"), "{args:?}");
    // The cluster CA every namespace has, and nothing secret.
    assert_eq!(
        pod["volumes"],
        json!([{ "name": "kube-ca", "configMap": { "name": "kube-root-ca.crt" } }])
    );
    assert_eq!(
        pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"],
        true
    );
    let service = find(&docs, "Service", name);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert!(service["spec"].get("sessionAffinity").is_none());

    // Behind a proxy, over HTTPS, two replicas: the flags, and a Service
    // that keeps a browser on the replica holding its session.
    let docs = render(&[
        "--set",
        "dashboard.enable=true",
        "--set",
        "dashboard.proxyAuth=true",
        "--set",
        "dashboard.secureCookie=true",
        "--set",
        "dashboard.replicas=2",
    ]);
    let args = args_of(find(&docs, "Deployment", name));
    assert!(args.iter().any(|a| a == "--proxy-auth"), "{args:?}");
    assert!(args.iter().any(|a| a == "--secure-cookie"), "{args:?}");
    assert_eq!(
        find(&docs, "Service", name)["spec"]["sessionAffinity"],
        "ClientIP"
    );

    for (set, expect) in [
        ("dashboard.refresh=soon", "at '/dashboard/refresh'"),
        (
            "dashboard.service.type=Internal",
            "at '/dashboard/service/type'",
        ),
        (
            "dashboard.tokens=yes",
            "additional properties 'tokens' not allowed",
        ),
    ] {
        let error = render_error(&["--set", set]);
        assert!(
            error.contains(expect),
            "{set}: wanted {expect:?} in:\n{error}"
        );
    }
}
