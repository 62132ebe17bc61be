//! `sparkoperator.k8s.io/v1beta2` SparkApplication. Spark describes its pods by
//! cores and JVM memory rather than pod templates, so the adapter derives each
//! pod's request the way Spark on Kubernetes sizes its pods: CPU from `cores`
//! (or `coreRequest`), memory = heap + overhead, plus a GPU if asked for.

use serde_json::{Map, Value, json};

use super::hold::{FieldPath, HoldStyle, SPEC_SUSPEND};
use super::json::{
    field, get_path, invalid, is_true, non_empty, opt_array, opt_count, opt_i64, opt_object,
    opt_str,
};
use super::pod_request::template_requests_at;
use super::{AdapterError, JobAdapter, JobKind, JobState, PodSetInfo};
use crate::resources::{format_quantity, parse_quantity};

/// The `sparkoperator.k8s.io/v1beta2` SparkApplication kind.
pub static SPARK_APPLICATION_KIND: JobKind = JobKind {
    group: "sparkoperator.k8s.io",
    version: "v1beta2",
    kind: "SparkApplication",
    plural: "sparkapplications",
    extension: "spark",
};

/// Adapter for SparkApplications: held with the suspend annotation and
/// `spec.suspend` (honoured by spark-operator ≥ 2.4; older CRDs prune it).
#[derive(Debug)]
pub struct SparkApplicationAdapter;

/// The suspend annotation and `spec.suspend`. A job without the field stays
/// held by the annotation: CRDs older than spark-operator 2.4 prune it.
const SPARK_HOLD: HoldStyle = HoldStyle::AnnotationAndField {
    field: SPEC_SUSPEND,
    absent_field_holds: true,
};
const MIB: i64 = 1 << 20;
/// Spark's minimum memory overhead per pod (`MEMORY_OVERHEAD_MIN_MIB`).
const MIN_OVERHEAD_MIB: i64 = 384;

/// The two kinds of Spark pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Driver,
    Executor,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Driver => "driver",
            Role::Executor => "executor",
        }
    }

    /// Name Spark gives the role's main container.
    fn container_name(self) -> &'static str {
        match self {
            Role::Driver => "spark-kubernetes-driver",
            Role::Executor => "spark-kubernetes-executor",
        }
    }
}

impl JobAdapter for SparkApplicationAdapter {
    fn kind(&self) -> &'static JobKind {
        &SPARK_APPLICATION_KIND
    }

    fn hold_style(&self) -> HoldStyle {
        SPARK_HOLD
    }

    /// `driver` (one pod) and `executor` (`spec.executor.instances`, default 1;
    /// with dynamic allocation the executors Spark starts with: the largest of
    /// `initialExecutors`, `minExecutors` and `instances`).
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError> {
        let spec = get_path(job, &["spec"]).unwrap_or(&Value::Null);
        if opt_object(Some(spec), "spec")?.is_none() {
            return Err(invalid("spec", "a SparkApplication spec is required"));
        }
        let conf = SparkConf::read(spec)?;
        let mut sets = Vec::with_capacity(2);
        for (role, count) in [
            (Role::Driver, 1),
            (Role::Executor, executor_count(spec, &conf)?),
        ] {
            let template = pod_template(spec, &conf, role)?;
            let per_pod =
                template_requests_at(&template, BUILT).map_err(|e| rename_built_path(e, role))?;
            sets.push(PodSetInfo {
                name: role.name().to_string(),
                count,
                template,
                per_pod,
            });
        }
        Ok(sets)
    }

    fn status_fields(&self) -> &'static [FieldPath] {
        &[&["status", "applicationState", "state"]]
    }

    /// From `status.applicationState.state`. `SUCCEEDING`/`FAILING` (the driver
    /// has ended, executors are being cleaned up) still count as running.
    fn state(&self, job: &Value) -> JobState {
        match get_path(job, &["status", "applicationState", "state"]).and_then(Value::as_str) {
            Some("COMPLETED") => JobState::Succeeded,
            Some("FAILED" | "SUBMISSION_FAILED") => JobState::Failed,
            Some("RUNNING" | "SUCCEEDING" | "FAILING") => JobState::Running,
            _ => JobState::Pending,
        }
    }

    /// The driver's priority class, else the executors', else the batch
    /// scheduler options'.
    fn priority_class_name(&self, job: &Value) -> Option<String> {
        [
            &["spec", "driver", "priorityClassName"][..],
            &["spec", "executor", "priorityClassName"],
            &["spec", "batchSchedulerOptions", "priorityClassName"],
        ]
        .iter()
        .find_map(|path| non_empty(get_path(job, path)))
    }
}

/// Label of the built pod template in error paths; rewritten by
/// [`rename_built_path`] to the SparkApplication fields it came from.
const BUILT: &str = "<built>";

/// Maps an error inside the built template back to the user's fields: its
/// containers are the role's `sidecars` (the main container comes last and
/// cannot fail), its init containers the role's `initContainers`.
fn rename_built_path(err: AdapterError, role: Role) -> AdapterError {
    let AdapterError::Invalid { path, reason } = err else {
        return err;
    };
    let role = role.name();
    let rest = path.strip_prefix(BUILT).unwrap_or(&path);
    let path = if let Some(rest) = rest.strip_prefix(".spec.containers") {
        format!("spec.{role}.sidecars{rest}")
    } else if let Some(rest) = rest.strip_prefix(".spec.initContainers") {
        format!("spec.{role}.initContainers{rest}")
    } else {
        format!("spec.{role}{rest}")
    };
    AdapterError::Invalid { path, reason }
}

/// `spec.sparkConf`, consulted when a typed field is unset (the typed fields
/// win: spark-operator passes them after the free-form configuration).
struct SparkConf<'a>(Option<&'a Map<String, Value>>);

impl<'a> SparkConf<'a> {
    fn read(spec: &'a Value) -> Result<Self, AdapterError> {
        Ok(Self(opt_object(
            field(spec, "sparkConf"),
            "spec.sparkConf",
        )?))
    }

    fn get(&self, key: &str) -> Result<Option<&'a str>, AdapterError> {
        opt_str(
            self.0.and_then(|m| m.get(key)),
            &format!("spec.sparkConf[{key}]"),
        )
    }

    /// The accelerators `sparkConf` gives one pod of `role`: Spark on
    /// Kubernetes asks for `spark.<role>.resource.<name>.amount` of the
    /// resource `<vendor>/<name>` (`spark.<role>.resource.<name>.vendor`).
    fn resources(&self, role: &str) -> Result<Vec<(String, i64)>, AdapterError> {
        let prefix = format!("spark.{role}.resource.");
        let mut found = Vec::new();
        for key in self.0.iter().flat_map(|m| m.keys()) {
            let Some(name) = key
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".amount"))
            else {
                continue;
            };
            let path = format!("spec.sparkConf[{key}]");
            let amount = self.get(key)?.unwrap_or_default();
            let amount = amount
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    invalid(
                        &path,
                        format!("expected a non-negative integer, found {amount:?}"),
                    )
                })?;
            let vendor_key = format!("{prefix}{name}.vendor");
            let Some(vendor) = self.get(&vendor_key)?.filter(|v| !v.is_empty()) else {
                return Err(invalid(
                    &path,
                    format!(
                        "{amount} {name} per pod without {vendor_key}: Spark on Kubernetes \
                         requests <vendor>/{name}, and which resource that is cannot be told"
                    ),
                ));
            };
            found.push((format!("{vendor}/{name}"), amount));
        }
        Ok(found)
    }

    /// An integer setting, e.g. `spark.executor.instances: "4"`.
    fn count(&self, key: &str) -> Result<Option<i32>, AdapterError> {
        match self.get(key)? {
            None => Ok(None),
            Some(text) => text
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .map(Some)
                .ok_or_else(|| {
                    invalid(
                        &format!("spec.sparkConf[{key}]"),
                        format!("expected a non-negative integer, found {text:?}"),
                    )
                }),
        }
    }
}

/// Number of executor pods: with dynamic allocation (the typed field or
/// `spark.dynamicAllocation.enabled` in `sparkConf`) the most Spark may run,
/// its `maxExecutors` — a queued job's size is fixed at admission, and Spark
/// scales up without asking the queue. Without a maximum Spark's is
/// unbounded: such a job cannot be sized and is refused.
fn executor_count(spec: &Value, conf: &SparkConf<'_>) -> Result<i32, AdapterError> {
    let instances = match opt_count(
        get_path(spec, &["executor", "instances"]),
        "spec.executor.instances",
    )? {
        Some(n) => Some(n),
        None => conf.count("spark.executor.instances")?,
    };
    let dynamic = field(spec, "dynamicAllocation");
    opt_object(dynamic, "spec.dynamicAllocation")?;
    let typed = dynamic.is_some_and(|d| is_true(d, &["enabled"]));
    let in_conf = conf
        .get("spark.dynamicAllocation.enabled")?
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !typed && !in_conf {
        return Ok(instances.unwrap_or(1));
    }
    // The typed fields win over sparkConf, as spark-operator passes them.
    let read = |key: &str| -> Result<Option<i32>, AdapterError> {
        match opt_count(
            dynamic.and_then(|d| field(d, key)),
            &format!("spec.dynamicAllocation.{key}"),
        )? {
            Some(n) => Ok(Some(n)),
            None => conf.count(&format!("spark.dynamicAllocation.{key}")),
        }
    };
    let Some(max) = read("maxExecutors")? else {
        return Err(invalid(
            "spec.dynamicAllocation.maxExecutors",
            "dynamic allocation is enabled without a maximum: Spark would start executors \
             without bound, beyond what the queue reserved. Set maxExecutors",
        ));
    };
    // Spark never runs more than maxExecutors; the others only matter when
    // they are larger (a configuration Spark itself refuses to start).
    Ok([
        Some(max),
        read("initialExecutors")?,
        read("minExecutors")?,
        instances,
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(max))
}

/// The pod template of one role: the main container with the requests Spark
/// gives it, after the role's sidecars, with its init containers and the
/// scheduling fields of the role.
fn pod_template(spec: &Value, conf: &SparkConf<'_>, role: Role) -> Result<Value, AdapterError> {
    let name = role.name();
    let path = format!("spec.{name}");
    let pod = field(spec, name).unwrap_or(&Value::Null);
    // An unset role takes Spark's defaults (1 core, 1g); any other non-object is refused.
    opt_object(Some(pod), &path)?;
    let at = |key: &str| field(pod, key);
    let at_path = |key: &str| format!("{path}.{key}");

    // CPU: the explicit request, else whole cores (default 1).
    let core_request = match opt_str(at("coreRequest"), &at_path("coreRequest"))? {
        Some(q) => Some((q, at_path("coreRequest"))),
        None => conf
            .get(&format!("spark.kubernetes.{name}.request.cores"))?
            .map(|q| {
                (
                    q,
                    format!("spec.sparkConf[spark.kubernetes.{name}.request.cores]"),
                )
            }),
    };
    let cpu_millis = match core_request {
        Some((q, q_path)) => {
            let m = parse_quantity("cpu", q).map_err(|e| invalid(&q_path, e.to_string()))?;
            if m < 0 {
                return Err(invalid(&q_path, format!("quantity {q:?} is negative")));
            }
            m
        }
        None => {
            let cores = match opt_count(at("cores"), &at_path("cores"))? {
                Some(c) => c,
                None => conf.count(&format!("spark.{name}.cores"))?.unwrap_or(1),
            };
            i64::from(cores) * 1000
        }
    };

    // Memory: heap (default 1g) + overhead, in whole MiB as Spark sizes it.
    let (memory, memory_path) = match opt_str(at("memory"), &at_path("memory"))? {
        Some(m) => (m, at_path("memory")),
        None => match conf.get(&format!("spark.{name}.memory"))? {
            Some(m) => (m, format!("spec.sparkConf[spark.{name}.memory]")),
            None => ("1g", at_path("memory")),
        },
    };
    let heap_mib = parse_jvm_memory_mib(memory, &memory_path)?;
    let overhead = match opt_str(at("memoryOverhead"), &at_path("memoryOverhead"))? {
        Some(m) => Some((m, at_path("memoryOverhead"))),
        None => conf
            .get(&format!("spark.{name}.memoryOverhead"))?
            .map(|m| (m, format!("spec.sparkConf[spark.{name}.memoryOverhead]"))),
    };
    let overhead_mib = match overhead {
        Some((m, m_path)) => parse_jvm_memory_mib(m, &m_path)?,
        None => default_overhead_mib(spec, heap_mib)?,
    };
    let memory_bytes = heap_mib
        .checked_add(overhead_mib)
        .and_then(|mib| mib.checked_mul(MIB))
        .ok_or_else(|| invalid(&memory_path, "memory is too large"))?;

    let mut requests = Map::new();
    requests.insert("cpu".into(), json!(format_quantity("cpu", cpu_millis).0));
    requests.insert("memory".into(), json!(memory_bytes.to_string()));
    let gpu_path = at_path("gpu");
    if let Some(gpu) = opt_object(at("gpu"), &gpu_path)? {
        let name_path = format!("{gpu_path}.name");
        let Some(gpu_name) = opt_str(gpu.get("name"), &name_path)?.filter(|n| !n.is_empty()) else {
            return Err(invalid(&name_path, "a GPU resource name is required"));
        };
        let qty_path = format!("{gpu_path}.quantity");
        let quantity = opt_i64(gpu.get("quantity"), &qty_path)?.unwrap_or(0);
        if quantity < 0 {
            return Err(invalid(
                &qty_path,
                format!("must not be negative, found {quantity}"),
            ));
        }
        if quantity > 0 {
            requests.insert(gpu_name.to_string(), json!(quantity.to_string()));
        }
    }

    for (resource, amount) in conf.resources(name)? {
        let more = requests
            .get(&resource)
            .and_then(Value::as_str)
            .and_then(|q| q.parse::<i64>().ok())
            .is_none_or(|had| amount > had);
        if more && amount > 0 {
            requests.insert(resource, json!(amount.to_string()));
        }
    }

    let mut containers = opt_array(at("sidecars"), &at_path("sidecars"))?.to_vec();
    containers.push(json!({
        "name": role.container_name(),
        "resources": {"requests": requests},
    }));
    let mut pod_spec = Map::new();
    pod_spec.insert("containers".into(), Value::Array(containers));
    for key in [
        "initContainers",
        "priorityClassName",
        "nodeSelector",
        "tolerations",
        "affinity",
        "schedulerName",
    ] {
        if let Some(v) = at(key) {
            pod_spec.insert(key.into(), v.clone());
        }
    }
    let mut metadata = Map::new();
    for key in ["labels", "annotations"] {
        if let Some(v) = at(key) {
            metadata.insert(key.into(), v.clone());
        }
    }
    Ok(json!({"metadata": metadata, "spec": pod_spec}))
}

/// Spark's default overhead: `memoryOverheadFactor` (default 0.10 for JVM
/// applications, 0.40 for Python and R) of the heap, at least 384 MiB.
fn default_overhead_mib(spec: &Value, heap_mib: i64) -> Result<i64, AdapterError> {
    let factor = match opt_str(
        field(spec, "memoryOverheadFactor"),
        "spec.memoryOverheadFactor",
    )? {
        Some(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .ok_or_else(|| {
                invalid(
                    "spec.memoryOverheadFactor",
                    format!("expected a non-negative number, found {text:?}"),
                )
            })?,
        None => match field(spec, "type").and_then(Value::as_str) {
            Some("Python" | "R") => 0.40,
            _ => 0.10,
        },
    };
    // Spark truncates the product to whole MiB.
    let scaled = (factor * heap_mib as f64).floor();
    if scaled >= i64::MAX as f64 {
        return Err(invalid(
            "spec.memoryOverheadFactor",
            "overhead is too large",
        ));
    }
    Ok((scaled as i64).max(MIN_OVERHEAD_MIB))
}

/// Parses a JVM memory string (`512m`, `2g`, `1024k`, `4gb`; case-insensitive;
/// binary units) into whole MiB, truncating as Spark does. A bare number is
/// MiB, the default unit of Spark's memory settings. Fractions are refused, as
/// Spark refuses them.
pub fn parse_jvm_memory_mib(text: &str, path: &str) -> Result<i64, AdapterError> {
    let lower = text.trim().to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, suffix) = lower.split_at(digits_end);
    let bad = |reason: &str| {
        invalid(
            path,
            format!("{reason} in JVM memory size {text:?} (e.g. 512m, 4g)"),
        )
    };
    if digits.is_empty() {
        return Err(bad("no number"));
    }
    if suffix.starts_with('.') {
        return Err(bad("fractional values are not supported"));
    }
    let value: i128 = digits.parse().map_err(|_| bad("number too large"))?;
    // (multiplier, divisor) to MiB.
    let (mul, div): (i128, i128) = match suffix {
        "" | "m" | "mb" => (1, 1),
        "b" => (1, 1 << 20),
        "k" | "kb" => (1, 1 << 10),
        "g" | "gb" => (1 << 10, 1),
        "t" | "tb" => (1 << 20, 1),
        "p" | "pb" => (1 << 30, 1),
        _ => return Err(bad("unknown unit")),
    };
    i64::try_from(value.saturating_mul(mul) / div).map_err(|_| bad("number too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::test_support::{GI, MI, assert_hold_release};
    use crate::jobs::total_resources;
    use crate::keys::SUSPEND_ANNOTATION;

    fn app() -> Value {
        json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "SparkApplication",
            "metadata": {"name": "spark-pi", "namespace": "team-a"},
            "spec": {
                "type": "Scala",
                "mode": "cluster",
                "image": "spark:3.5.3",
                "mainClass": "org.apache.spark.examples.SparkPi",
                "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                "sparkVersion": "3.5.3",
                "driver": {"cores": 1, "memory": "512m", "serviceAccount": "spark", "priorityClassName": "spark-high"},
                "executor": {"cores": 2, "instances": 3, "memory": "4g", "memoryOverhead": "1g",
                             "gpu": {"name": "nvidia.com/gpu", "quantity": 1}},
            }
        })
    }

    fn with_spec(patch: Value) -> Value {
        let mut job = app();
        for (k, v) in patch.as_object().unwrap() {
            job["spec"][k] = v.clone();
        }
        job
    }

    #[test]
    fn hold_sets_annotation_and_suspend() {
        let (held, released) = assert_hold_release(&SparkApplicationAdapter, &app());
        assert_eq!(
            held["metadata"]["annotations"][SUSPEND_ANNOTATION],
            json!("true")
        );
        assert_eq!(held["spec"]["suspend"], json!(true));
        assert_eq!(released["spec"]["suspend"], json!(false));
        assert_eq!(released["metadata"]["annotations"], json!({}));

        // spark-operator < 2.4 prunes spec.suspend: the annotation alone holds,
        // and explicitly unsuspending lifts the hold.
        let mut pruned = held.clone();
        pruned["spec"].as_object_mut().unwrap().remove("suspend");
        assert!(SparkApplicationAdapter.is_held(&pruned));
        let mut unsuspended = held;
        unsuspended["spec"]["suspend"] = json!(false);
        assert!(!SparkApplicationAdapter.is_held(&unsuspended));
        let mut only_field = app();
        only_field["spec"]["suspend"] = json!(true);
        assert!(!SparkApplicationAdapter.is_held(&only_field));
    }

    #[test]
    fn driver_and_executors_sized_like_spark() {
        let sets = SparkApplicationAdapter.pod_sets(&app()).unwrap();
        assert_eq!(sets.len(), 2);
        let (driver, executor) = (&sets[0], &sets[1]);
        assert_eq!((driver.name.as_str(), driver.count), ("driver", 1));
        assert_eq!((executor.name.as_str(), executor.count), ("executor", 3));
        // 512m heap + max(51 MiB, 384 MiB) overhead.
        assert_eq!(driver.per_pod.get("cpu"), 1000);
        assert_eq!(driver.per_pod.get("memory"), (512 + 384) * MI);
        assert_eq!(
            driver.template["spec"]["priorityClassName"],
            json!("spark-high")
        );
        assert_eq!(
            driver.template["spec"]["containers"][0]["name"],
            json!("spark-kubernetes-driver")
        );
        // 4g heap + 1g explicit overhead, one GPU.
        assert_eq!(executor.per_pod.get("cpu"), 2000);
        assert_eq!(executor.per_pod.get("memory"), 5 * GI);
        assert_eq!(executor.per_pod.get("nvidia.com/gpu"), 1);
        let total = total_resources(&sets);
        assert_eq!(total.get("cpu"), 7000);
        assert_eq!(total.get("memory"), 896 * MI + 15 * GI);
        assert_eq!(total.get("nvidia.com/gpu"), 3);
    }

    #[test]
    fn default_overhead() {
        let executor = |patch: Value| {
            SparkApplicationAdapter.pod_sets(&with_spec(patch)).unwrap()[1]
                .per_pod
                .get("memory")
        };
        // 10 GiB heap: 10% = 1024 MiB overhead.
        assert_eq!(executor(json!({"executor": {"memory": "10g"}})), 11 * GI);
        // Python: 40% of 10 GiB = 4096 MiB.
        assert_eq!(
            executor(json!({"type": "Python", "executor": {"memory": "10240m"}})),
            14 * GI
        );
        // Explicit factor.
        assert_eq!(
            executor(json!({"memoryOverheadFactor": "0.2", "executor": {"memory": "10g"}})),
            12 * GI
        );
        // Small heaps get the 384 MiB floor; unset memory is Spark's 1g.
        assert_eq!(
            executor(json!({"executor": {"memory": "2g"}})),
            2 * GI + 384 * MI
        );
        assert_eq!(executor(json!({"executor": {}})), GI + 384 * MI);
        // sparkConf fills unset fields.
        assert_eq!(
            executor(
                json!({"executor": {}, "sparkConf": {"spark.executor.memory": "8g", "spark.executor.memoryOverhead": "512"}})
            ),
            8 * GI + 512 * MI
        );
    }

    #[test]
    fn cpu_from_cores_or_core_request() {
        let driver_cpu = |driver: Value| {
            SparkApplicationAdapter
                .pod_sets(&with_spec(json!({"driver": driver})))
                .unwrap()[0]
                .per_pod
                .get("cpu")
        };
        assert_eq!(driver_cpu(json!({"cores": 4})), 4000);
        assert_eq!(driver_cpu(json!({"cores": 4, "coreRequest": "500m"})), 500);
        assert_eq!(driver_cpu(json!({})), 1000);
    }

    #[test]
    fn executor_counts() {
        let count =
            |patch: Value| SparkApplicationAdapter.pod_sets(&with_spec(patch)).unwrap()[1].count;
        assert_eq!(count(json!({"executor": {"cores": 1}})), 1);
        assert_eq!(
            count(json!({"executor": {}, "sparkConf": {"spark.executor.instances": "6"}})),
            6
        );
        // Dynamic allocation: its maximum, what Spark may scale up to.
        assert_eq!(
            count(
                json!({"dynamicAllocation": {"enabled": true, "initialExecutors": 2, "minExecutors": 1, "maxExecutors": 10}})
            ),
            10
        );
        assert_eq!(
            count(
                json!({"executor": {}, "dynamicAllocation": {"enabled": true, "minExecutors": 4, "maxExecutors": 6}})
            ),
            6
        );
        assert_eq!(
            count(json!({"executor": {}, "sparkConf": {
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.maxExecutors": "12"}})),
            12,
            "enabled through sparkConf"
        );
        assert_eq!(
            count(json!({"dynamicAllocation": {"enabled": false, "initialExecutors": 9}})),
            3
        );
    }

    #[test]
    fn accelerators_in_sparkconf_count() {
        let job = with_spec(json!({ "sparkConf": {
            "spark.executor.resource.gpu.amount": "2",
            "spark.executor.resource.gpu.vendor": "nvidia.com",
            "spark.driver.resource.fpga.amount": "1",
            "spark.driver.resource.fpga.vendor": "xilinx.com" },
            "executor": { "instances": 3, "gpu": { "name": "nvidia.com/gpu", "quantity": 1 } } }));
        let sets = SparkApplicationAdapter.pod_sets(&job).unwrap();
        assert_eq!(sets[0].per_pod.get("xilinx.com/fpga"), 1);
        assert_eq!(
            sets[1].per_pod.get("nvidia.com/gpu"),
            2,
            "the larger of both"
        );
    }

    #[test]
    fn sidecars_and_init_containers_count() {
        let job = with_spec(json!({"driver": {
            "cores": 1, "memory": "1g",
            "sidecars": [{"name": "log", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
            "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "3"}}}],
        }}));
        let driver = &SparkApplicationAdapter.pod_sets(&job).unwrap()[0];
        // max(1000 + 100, 3000) CPU; 1g + 384m + 64Mi memory.
        assert_eq!(driver.per_pod.get("cpu"), 3000);
        assert_eq!(driver.per_pod.get("memory"), GI + 448 * MI);
    }

    #[test]
    fn jvm_memory_strings() {
        let mib = |s| parse_jvm_memory_mib(s, "m");
        assert_eq!(mib("512m"), Ok(512));
        assert_eq!(mib("512M"), Ok(512));
        assert_eq!(mib("1g"), Ok(1024));
        assert_eq!(mib("2GB"), Ok(2048));
        assert_eq!(mib("1t"), Ok(1 << 20));
        assert_eq!(mib("2048k"), Ok(2));
        assert_eq!(mib("1536k"), Ok(1));
        assert_eq!(mib("1073741824b"), Ok(1024));
        assert_eq!(mib("384"), Ok(384));
        for bad in [
            "",
            "g",
            "1.5g",
            "1Gi",
            "-1g",
            "12 x",
            "99999999999999999999999999999999999999999g",
        ] {
            assert!(mib(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn malformed_applications_are_refused() {
        let cases = [
            (
                json!({"executor": {"instances": "3"}}),
                "spec.executor.instances",
            ),
            (
                json!({"executor": {"instances": -1}}),
                "spec.executor.instances",
            ),
            (
                json!({"executor": {"memory": "1.5g"}}),
                "spec.executor.memory",
            ),
            (json!({"executor": {"memory": 512}}), "spec.executor.memory"),
            (json!({"driver": {"cores": 1.5}}), "spec.driver.cores"),
            (
                json!({"driver": {"coreRequest": "lots"}}),
                "spec.driver.coreRequest",
            ),
            (json!({"driver": "big"}), "spec.driver"),
            (
                json!({"executor": {"gpu": {"quantity": 1}}}),
                "spec.executor.gpu.name",
            ),
            (
                json!({"executor": {"gpu": {"name": "nvidia.com/gpu", "quantity": -1}}}),
                "spec.executor.gpu.quantity",
            ),
            (
                json!({"memoryOverheadFactor": "lots"}),
                "spec.memoryOverheadFactor",
            ),
            (
                json!({"dynamicAllocation": {"enabled": true, "minExecutors": -3, "maxExecutors": 4}}),
                "spec.dynamicAllocation.minExecutors",
            ),
            (
                json!({"dynamicAllocation": {"enabled": true, "minExecutors": 1}}),
                "spec.dynamicAllocation.maxExecutors",
            ),
            (
                json!({"executor": {}, "sparkConf": {"spark.dynamicAllocation.enabled": "true"}}),
                "spec.dynamicAllocation.maxExecutors",
            ),
            (
                json!({"sparkConf": {"spark.executor.resource.gpu.amount": "2"}}),
                "spec.sparkConf[spark.executor.resource.gpu.amount]",
            ),
            (
                json!({"sparkConf": {"spark.driver.resource.gpu.amount": "x",
                                     "spark.driver.resource.gpu.vendor": "nvidia.com"}}),
                "spec.sparkConf[spark.driver.resource.gpu.amount]",
            ),
            (
                json!({"sparkConf": {"spark.executor.instances": "many"}, "executor": {}}),
                "spec.sparkConf[spark.executor.instances]",
            ),
            (
                json!({"driver": {"sidecars": [{"resources": {"requests": {"cpu": "x"}}}]}}),
                "spec.driver.sidecars[0].resources.requests.cpu",
            ),
            (
                json!({"driver": {"initContainers": {}}}),
                "spec.driver.initContainers",
            ),
        ];
        for (patch, want) in cases {
            match SparkApplicationAdapter.pod_sets(&with_spec(patch.clone())) {
                Err(AdapterError::Invalid { path, .. }) => assert_eq!(path, want, "{patch}"),
                other => panic!("{patch}: {other:?}"),
            }
        }
    }

    #[test]
    fn state_from_application_state() {
        let with = |state: &str| {
            let mut job = app();
            job["status"] = json!({"applicationState": {"state": state}});
            SparkApplicationAdapter.state(&job)
        };
        assert_eq!(SparkApplicationAdapter.state(&app()), JobState::Pending);
        assert_eq!(with("SUBMITTED"), JobState::Pending);
        assert_eq!(with("RUNNING"), JobState::Running);
        assert_eq!(with("SUCCEEDING"), JobState::Running);
        assert_eq!(with("COMPLETED"), JobState::Succeeded);
        assert_eq!(with("FAILED"), JobState::Failed);
        assert_eq!(with("SUBMISSION_FAILED"), JobState::Failed);
        assert_eq!(with("SUSPENDED"), JobState::Pending);
    }

    #[test]
    fn priority_class() {
        assert_eq!(
            SparkApplicationAdapter
                .priority_class_name(&app())
                .as_deref(),
            Some("spark-high")
        );
        let job = with_spec(
            json!({"driver": {}, "batchSchedulerOptions": {"priorityClassName": "batch"}}),
        );
        assert_eq!(
            SparkApplicationAdapter.priority_class_name(&job).as_deref(),
            Some("batch")
        );
    }
}
