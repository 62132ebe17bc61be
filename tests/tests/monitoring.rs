//! The chart's Grafana dashboard and PrometheusRule alerts (issue 42): both
//! off by default and rendered behind `monitoring.*`; the dashboard a valid
//! Grafana JSON in a ConfigMap for the sidecar, every query on the data
//! source variable; the rules valid groups whose thresholds come from the
//! values, each alert with a summary, a description and a runbook in
//! docs/metrics.md. Every metric name a query or an expression uses (read by
//! a small PromQL reader, tested here too) is exposed by a live scheduler's
//! or webhook's `/metrics` on the real control plane once jobs have been
//! released, preempted and refused: a name no process exposes fails (`up`,
//! which Prometheus makes itself, is the one exception).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use koord_queue_api::queue_unit::QueueUnitPhase::Running;
use koord_queue_api::{Queue, keys};
use koord_queue_tests::e2e::{self, kubectl_create_job, wait_phase};
use koord_queue_tests::install::{chart_dir, parse_manifest};
use koord_queue_tests::tools::{self, Tool};
use koord_queue_tests::{fixtures, metrics, scheduler, shared, webhook};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

const NS: &str = "koord-queue";
const LONG: Duration = Duration::from_secs(60);

/// Series Prometheus makes itself for every target: used by the alerts that
/// a component is down, exposed by no process.
const PROMETHEUS_OWN: &[&str] = &["up"];

/// The alerts the chart renders with the default thresholds.
const ALERTS: &[&str] = &[
    "KoordQueueQuotaOverMax",
    "KoordQueueUnitsWaitingTooLong",
    "KoordQueueQueueStalled",
    "KoordQueueNoSchedulerLeader",
    "KoordQueueSchedulerDown",
    "KoordQueueWebhookFailing",
    "KoordQueueWebhookRefusing",
    "KoordQueueWebhookDown",
];

// ---------------------------------------------------------------------------
// A small PromQL reader: the metric names an expression selects.
// ---------------------------------------------------------------------------

/// Aggregation operators (followed by `by`/`without` or their arguments).
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Words that are neither metrics nor functions.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "atan2", "offset", "inf", "nan",
];

/// Keywords followed by a list of label names in parentheses (optional
/// after `group_left` and `group_right`).
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// PromQL's functions (a name followed by `(` that is not one of them is a
/// mistake, not a metric).
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "count_over_time",
    "day_of_month",
    "day_of_week",
    "days_in_month",
    "delta",
    "deriv",
    // start() and end(), of the @ modifier.
    "end",
    "exp",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_sum",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sort",
    "sort_desc",
    "sqrt",
    "start",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "time",
    "timestamp",
    "vector",
    "year",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index just past the string literal opening at `start` (`"`, `'` or
/// a backquote).
fn skip_string(chars: &[char], start: usize) -> Result<usize, String> {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(format!("unterminated string from offset {start}"))
}

/// The index of the `close` that ends the group opening at `start`
/// (strings inside skipped, no nesting of `open`).
fn group_end(chars: &[char], start: usize, close: char) -> Result<usize, String> {
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = skip_string(chars, i)?,
            c if c == close => return Ok(i),
            _ => i += 1,
        }
    }
    Err(format!("no '{close}' closes the one at offset {start}"))
}

fn skip_spaces(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

/// The matchers `name op "value"` of a selector's braces: checks them, and
/// returns the metric named by `__name__="..."` if there is one.
fn read_matchers(text: &str) -> Result<Option<String>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut named = None;
    let mut i = skip_spaces(&chars, 0);
    while i < chars.len() {
        let start = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        let label: String = chars[start..i].iter().collect();
        if label.is_empty() || !is_ident_start(chars[start]) {
            return Err(format!(
                "a label matcher without a label name in {{{text}}}"
            ));
        }
        i = skip_spaces(&chars, i);
        let op_start = i;
        while i < chars.len() && matches!(chars[i], '=' | '!' | '~') {
            i += 1;
        }
        let op: String = chars[op_start..i].iter().collect();
        if !["=", "!=", "=~", "!~"].contains(&op.as_str()) {
            return Err(format!("matcher {label} has operator {op:?} in {{{text}}}"));
        }
        i = skip_spaces(&chars, i);
        if i >= chars.len() || !matches!(chars[i], '"' | '\'' | '`') {
            return Err(format!("matcher {label} has no quoted value in {{{text}}}"));
        }
        let end = skip_string(&chars, i)?;
        if label == "__name__" && op == "=" {
            named = Some(chars[i + 1..end - 1].iter().collect());
        }
        i = skip_spaces(&chars, end);
        if i < chars.len() {
            if chars[i] != ',' {
                return Err(format!("matchers not separated by ',' in {{{text}}}"));
            }
            i = skip_spaces(&chars, i + 1);
        }
    }
    Ok(named)
}

/// The metric names the PromQL expression `expr` selects, or why it does
/// not read as PromQL (unbalanced brackets, an unknown function, a bad
/// matcher, an unterminated string). Grafana's variables (`$namespace`,
/// `${x}`, `$__rate_interval`) are accepted where values and durations go,
/// and a Grafana variable query `label_values(<selector>, <label>)` is read
/// as its selector.
fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let trimmed = expr.trim();
    if let Some(args) = trimmed
        .strip_prefix("label_values(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        // label_values(label) names no metric; label_values(selector, label).
        return match args.rfind(',') {
            Some(comma) => metric_names(&args[..comma]),
            None => Ok(BTreeSet::new()),
        };
    }
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut parens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '"' | '\'' | '`' => i = skip_string(&chars, i)?,
            '{' => {
                let end = group_end(&chars, i, '}')?;
                let inner: String = chars[i + 1..end].iter().collect();
                if let Some(name) = read_matchers(&inner)? {
                    names.insert(name);
                }
                i = end + 1;
            }
            '[' => {
                let end = group_end(&chars, i, ']')?;
                let inner: String = chars[i + 1..end].iter().collect();
                let ok = !inner.trim().is_empty()
                    && inner
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "$_{}:.".contains(c));
                if !ok {
                    return Err(format!("[{inner}] is not a range"));
                }
                i = end + 1;
            }
            '(' => {
                parens.push(i);
                i += 1;
            }
            ')' => {
                if parens.pop().is_none() {
                    return Err(format!("')' at offset {i} closes nothing"));
                }
                i += 1;
            }
            '$' => {
                // A Grafana variable: $name or ${name}.
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = group_end(&chars, i, '}')? + 1;
                } else {
                    while i < chars.len() && is_ident(chars[i]) {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                // A number or a duration (0.95, 1e3, 5m, 1h30m).
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if is_ident_start(c) => {
                let start = i;
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = skip_spaces(&chars, i);
                let opens = chars.get(next) == Some(&'(');
                let lower = word.to_ascii_lowercase();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    if opens {
                        let end = group_end(&chars, next, ')')?;
                        let list: String = chars[next + 1..end].iter().collect();
                        if !list
                            .split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .all(|l| l.chars().all(is_ident))
                        {
                            return Err(format!("{word} ({list}) is not a list of labels"));
                        }
                        i = end + 1;
                    } else if !lower.starts_with("group_") {
                        return Err(format!("{word} without its list of labels"));
                    }
                } else if KEYWORDS.contains(&lower.as_str())
                    || AGGREGATIONS.contains(&word.as_str())
                {
                    // An operator: what follows is read as usual.
                } else if opens {
                    if !FUNCTIONS.contains(&word.as_str()) {
                        return Err(format!("unknown function {word}"));
                    }
                } else {
                    names.insert(word);
                }
            }
            '+' | '-' | '*' | '/' | '%' | '^' | '=' | '!' | '<' | '>' | ',' | '@' | ':' => i += 1,
            other => return Err(format!("unexpected {other:?} at offset {i}")),
        }
    }
    match parens.pop() {
        Some(open) => Err(format!("the '(' at offset {open} is not closed")),
        None => Ok(names),
    }
}

/// The metric names that have samples in Prometheus text (what a scrape
/// would store): `name{labels} value` and `name value` lines.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn the_reader_finds_the_metrics_of_an_expression() {
    for (expr, want) in [
        ("up", vec!["up"]),
        (
            r#"sum by (queue) (rate(a_total{x="y", z=~"$queue"}[5m]))"#,
            vec!["a_total"],
        ),
        (
            r#"histogram_quantile(0.9, sum by (le) (rate(b_bucket{ns="$namespace"}[$__rate_interval])))"#,
            vec!["b_bucket"],
        ),
        (
            "a > on(instance) group_left(foo, bar) b unless ignoring (x) c offset 1h30m",
            vec!["a", "b", "c"],
        ),
        ("a * on(instance) group_left b", vec!["a", "b"]),
        (
            r#"(max(koord:rule{a="{not a metric}"}) or vector(0)) < 1"#,
            vec!["koord:rule"],
        ),
        (r#"absent(up{job="x", namespace="ns"} == 1)"#, vec!["up"]),
        (r#"{__name__="named", l!~'v\'w'}"#, vec!["named"]),
        ("sum without (pod) (m) / 1e3 + .5", vec!["m"]),
        (
            "min_over_time(rate(m_total[5m])[1h:1m]) and bool n",
            vec!["m_total", "n"],
        ),
        (r#"topk(3, m{a="b"}) @ start()"#, vec!["m"]),
        ("${datasource_var} + m", vec!["m"]),
        (
            r#"label_values(koord_queue_scheduler_quota_max{namespace="$namespace"}, quota)"#,
            vec!["koord_queue_scheduler_quota_max"],
        ),
        ("label_values(namespace)", vec![]),
    ] {
        assert_eq!(metric_names(expr), Ok(set(&want)), "metrics of {expr}");
    }
}

#[test]
fn the_reader_refuses_what_is_not_promql() {
    for (expr, why) in [
        ("sum(rate(a[5m])", "not closed"),
        ("a)", "closes nothing"),
        ("rat(a[5m])", "unknown function rat"),
        (r#"a{b="c}"#, "unterminated"),
        ("a{b}", "operator"),
        (r#"a{b=c}"#, "quoted value"),
        ("a{b=\"c\" d=\"e\"}", "separated"),
        ("rate(a[5 m])", "not a range"),
        ("sum by queue (a)", "without its list"),
        ("a # b", "unexpected"),
    ] {
        let err = metric_names(expr).expect_err(expr);
        assert!(err.contains(why), "{expr}: {err}");
    }
}

#[test]
fn the_sample_reader_takes_the_names_of_samples_only() {
    let text = "# HELP a_total A.\n# TYPE a counter\na_total{x=\"y z\"} 1\n\
                b 2\nc_bucket{le=\"+Inf\"} 3 # {trace=\"1\"} 1.0\n# EOF\n";
    assert_eq!(sample_names(text), set(&["a_total", "b", "c_bucket"]));
}

// ---------------------------------------------------------------------------
// The rendered objects.
// ---------------------------------------------------------------------------

/// `helm template koord-queue <chart> -n koord-queue <extra>`: the objects.
fn render(extra: &[&str]) -> Vec<Value> {
    let home = tempfile::tempdir().unwrap();
    let chart = chart_dir();
    let mut args = vec!["template", "koord-queue", chart.to_str().unwrap(), "-n", NS];
    args.extend_from_slice(extra);
    let output = std::process::Command::new(tools::path(Tool::Helm).unwrap())
        .args(&args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env("KUBECONFIG", home.path().join("none"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "helm template {extra:?} failed:\n{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse_manifest(&text).unwrap()
}

const BOTH: &[&str] = &[
    "--set",
    "monitoring.grafanaDashboard.enable=true",
    "--set",
    "monitoring.prometheusRule.enable=true",
];

fn dashboard_map(docs: &[Value]) -> Option<&Value> {
    docs.iter().find(|d| {
        d["kind"] == "ConfigMap" && d["metadata"]["name"] == "koord-queue-grafana-dashboard"
    })
}

fn rule(docs: &[Value]) -> Option<&Value> {
    docs.iter().find(|d| d["kind"] == "PrometheusRule")
}

/// The dashboard of a rendered ConfigMap.
fn dashboard_of(map: &Value) -> Value {
    serde_json::from_str(map["data"]["koord-queue.json"].as_str().unwrap())
        .expect("the dashboard is JSON")
}

/// Every panel of a dashboard, those of rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// `(where, query)` of every PromQL query of a dashboard: its panels'
/// targets and its query variables.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(dashboard) {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                format!("panel {:?} target {}", p["title"], t["refId"]),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            out.push((
                format!("variable {}", v["name"]),
                v["query"]["query"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// `(alert, expr)` of every rule of a PrometheusRule.
fn rule_exprs(rule: &Value) -> Vec<(String, String)> {
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every metric name the dashboard and the rules use, with where each is used.
fn used_names(docs: &[Value]) -> BTreeMap<String, Vec<String>> {
    let dashboard = dashboard_of(dashboard_map(docs).unwrap());
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let queries = dashboard_queries(&dashboard)
        .into_iter()
        .chain(rule_exprs(rule(docs).unwrap()));
    for (place, query) in queries {
        let names = metric_names(&query).unwrap_or_else(|e| panic!("{place}: {e}\n{query}"));
        assert!(!names.is_empty(), "{place} reads no metric: {query}");
        for name in names {
            used.entry(name).or_default().push(place.clone());
        }
    }
    used
}

#[test]
fn both_are_off_by_default_and_rendered_behind_their_values() {
    let docs = render(&[]);
    assert!(dashboard_map(&docs).is_none(), "no dashboard by default");
    assert!(rule(&docs).is_none(), "no PrometheusRule by default");

    let docs = render(BOTH);
    let map = dashboard_map(&docs).expect("the dashboard's ConfigMap");
    assert_eq!(map["metadata"]["namespace"], NS);
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    // The ConfigMap holds the chart's file as it is.
    let file = std::fs::read_to_string(chart_dir().join("files/grafana/koord-queue.json")).unwrap();
    assert_eq!(
        map["data"]["koord-queue.json"].as_str().unwrap(),
        file.trim_end()
    );
    let prometheus_rule = rule(&docs).expect("the PrometheusRule");
    assert_eq!(prometheus_rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(prometheus_rule["metadata"]["namespace"], NS);

    // The sidecar's label, folder annotation and namespace are values.
    let docs = render(&[
        "--set",
        "monitoring.grafanaDashboard.enable=true",
        "--set",
        "monitoring.grafanaDashboard.labels.grafana_dashboard=null",
        "--set",
        "monitoring.grafanaDashboard.labels.dashboards=koord",
        "--set",
        "monitoring.grafanaDashboard.annotations.grafana_folder=Batch",
        "--set",
        "monitoring.grafanaDashboard.namespace=grafana",
        "--set",
        "monitoring.prometheusRule.enable=true",
        "--set",
        "monitoring.prometheusRule.labels.release=prometheus",
    ]);
    let map = dashboard_map(&docs).unwrap();
    assert_eq!(map["metadata"]["namespace"], "grafana");
    assert_eq!(map["metadata"]["labels"]["dashboards"], "koord");
    assert!(map["metadata"]["labels"].get("grafana_dashboard").is_none());
    assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "Batch");
    assert_eq!(
        rule(&docs).unwrap()["metadata"]["labels"]["release"],
        "prometheus"
    );
}

#[test]
fn the_dashboard_is_grafana_json_whose_queries_read_as_promql() {
    let docs = render(BOTH);
    let dashboard = dashboard_of(dashboard_map(&docs).unwrap());
    assert_eq!(dashboard["uid"], "koord-queue");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        variables,
        ["datasource", "namespace", "resource", "quota", "queue"]
    );
    // Every panel and query on the data source the user picks, every
    // query of the release's namespace.
    let mut ids = BTreeSet::new();
    let mut titles = Vec::new();
    for p in panels(&dashboard) {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "panel ids are unique"
        );
        let grid = &p["gridPos"];
        assert!(
            grid["x"].as_u64().unwrap() + grid["w"].as_u64().unwrap() <= 24,
            "{} fits the grid",
            p["title"]
        );
        if p["type"] == "row" {
            continue;
        }
        titles.push(p["title"].as_str().unwrap());
        assert!(
            p["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{} says what it shows",
            p["title"]
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has a query", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}");
        }
    }
    for (place, query) in dashboard_queries(&dashboard) {
        metric_names(&query).unwrap_or_else(|e| panic!("{place}: {e}\n{query}"));
        if !place.contains("variable \"namespace\"") {
            assert!(
                query.contains(r#"namespace="$namespace""#),
                "{place} reads the chosen namespace: {query}"
            );
        }
    }
    // What the issue asks the dashboard to show.
    for wanted in [
        "Quota $quota: used, min and max of $resource",
        "Units waiting per queue",
        "Time from QueueUnit to release",
        "Releases",
        "Reclaims and preemptions",
        "Leadership",
        "Scheduling cycle duration",
        "Admission reviews",
        "Refusals",
        "API write backlog",
    ] {
        assert!(titles.contains(&wanted), "a panel {wanted:?} in {titles:?}");
    }
}

/// The alerts of a rendered PrometheusRule by name.
fn alerts(docs: &[Value]) -> BTreeMap<String, Value> {
    rule(docs).unwrap()["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter().cloned())
        .map(|r| (r["alert"].as_str().unwrap().to_string(), r))
        .collect()
}

#[test]
fn the_rules_are_promql_groups_with_thresholds_from_the_values_and_runbooks() {
    let docs = render(BOTH);
    for group in rule(&docs).unwrap()["spec"]["groups"].as_array().unwrap() {
        assert!(group["name"].as_str().unwrap().starts_with("koord-queue."));
        assert!(!group["rules"].as_array().unwrap().is_empty());
    }
    let all = alerts(&docs);
    assert_eq!(all.keys().cloned().collect::<BTreeSet<_>>(), set(ALERTS));
    let metrics_doc = std::fs::read_to_string(chart_dir().join("../../docs/metrics.md")).unwrap();
    for (name, alert) in &all {
        let expr = alert["expr"].as_str().unwrap();
        metric_names(expr).unwrap_or_else(|e| panic!("{name}: {e}\n{expr}"));
        assert!(
            expr.contains(&format!(r#"namespace="{NS}""#)),
            "{name} reads the release's namespace: {expr}"
        );
        assert!(alert["for"].as_str().is_some(), "{name} has a for");
        assert!(
            ["warning", "critical"].contains(&alert["labels"]["severity"].as_str().unwrap()),
            "{name}"
        );
        for key in ["summary", "description", "runbook"] {
            assert!(
                alert["annotations"][key]
                    .as_str()
                    .is_some_and(|s| s.len() > 10),
                "{name} has a {key}"
            );
        }
        assert!(
            alert["annotations"]["runbook"]
                .as_str()
                .unwrap()
                .contains("docs/metrics.md")
        );
        assert!(
            metrics_doc.contains(&format!("#### {name}\n")),
            "docs/metrics.md has a runbook for {name}"
        );
    }
    // The defaults.
    let expr =
        |all: &BTreeMap<String, Value>, name: &str| all[name]["expr"].as_str().unwrap().to_string();
    assert!(expr(&all, "KoordQueueUnitsWaitingTooLong").contains("> 1800"));
    assert!(expr(&all, "KoordQueueUnitsWaitingTooLong").contains("[30m]"));
    assert_eq!(all["KoordQueueNoSchedulerLeader"]["for"], "2m");
    assert!(
        expr(&all, "KoordQueueWebhookDown")
            .contains(r#"up{job="koord-queue-webhook-metrics", namespace="koord-queue"}"#)
    );

    // Thresholds, severities, jobs and each alert's presence are values.
    let mut args: Vec<&str> = BOTH.to_vec();
    args.extend([
        "--set",
        "monitoring.prometheusRule.alerts.waitingTooLong.seconds=600",
        "--set",
        "monitoring.prometheusRule.alerts.waitingTooLong.window=1h",
        "--set",
        "monitoring.prometheusRule.alerts.noLeader.for=7m",
        "--set",
        "monitoring.prometheusRule.alerts.quotaOverMax.severity=critical",
        // --set reads 0.25 as a string; a values file as a number.
        "--set-json",
        "monitoring.prometheusRule.alerts.webhookRefusing.ratio=0.25",
        "--set",
        "monitoring.prometheusRule.alerts.webhookRefusing.minRefusals=3",
        "--set",
        "monitoring.prometheusRule.alerts.queueStalled.enable=false",
        "--set",
        "monitoring.prometheusRule.webhookJob=kq-hook",
    ]);
    let docs = render(&args);
    let all = alerts(&docs);
    assert!(!all.contains_key("KoordQueueQueueStalled"));
    assert!(expr(&all, "KoordQueueUnitsWaitingTooLong").contains("> 600"));
    assert!(expr(&all, "KoordQueueUnitsWaitingTooLong").contains("[1h]"));
    assert_eq!(all["KoordQueueNoSchedulerLeader"]["for"], "7m");
    assert_eq!(
        all["KoordQueueQuotaOverMax"]["labels"]["severity"],
        "critical"
    );
    assert!(expr(&all, "KoordQueueWebhookRefusing").contains("> 0.25"));
    assert!(expr(&all, "KoordQueueWebhookRefusing").contains(">= 3"));
    assert!(expr(&all, "KoordQueueWebhookDown").contains(r#"job="kq-hook""#));

    // A component with no pod in the release gets no alert that it is down
    // or without a leader.
    let mut args: Vec<&str> = BOTH.to_vec();
    args.extend([
        "--set",
        "scheduler.replicas=0",
        "--set",
        "webhook.replicas=0",
    ]);
    let all = alerts(&render(&args));
    for gone in [
        "KoordQueueSchedulerDown",
        "KoordQueueNoSchedulerLeader",
        "KoordQueueWebhookDown",
    ] {
        assert!(!all.contains_key(gone), "{gone}");
    }
}

#[test]
fn the_schema_refuses_thresholds_the_alerts_cannot_use() {
    let chart = chart_dir();
    for (value, wanted) in [
        (
            "monitoring.prometheusRule.alerts.waitingTooLong.seconds=9000",
            "maximum",
        ),
        (
            "monitoring.prometheusRule.alerts.noLeader.for=soon",
            "pattern",
        ),
        (
            "monitoring.prometheusRule.alerts.webhookRefusing.ratio=2",
            "maximum",
        ),
        (
            "monitoring.prometheusRule.alerts.unknown.enable=true",
            "additional",
        ),
        ("monitoring.grafanaDashboard.enabled=true", "additional"),
    ] {
        let output = std::process::Command::new(tools::path(Tool::Helm).unwrap())
            .args(["template", "kq", chart.to_str().unwrap(), "--set", value])
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{value} is refused");
        assert!(text.contains(wanted), "{value}: {text}");
    }
}

// ---------------------------------------------------------------------------
// The names against live processes.
// ---------------------------------------------------------------------------

const LOW: &str = "kq-monitoring-low";
const HIGH: &str = "kq-monitoring-high";

/// A webhook and a scheduler on the real control plane see a job released,
/// one preempted and a bare pod refused; then every name the dashboard and
/// the rules use has samples in one of their `/metrics`.
#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_use_is_exposed_by_a_live_component() {
    let used = used_names(&render(BOTH));
    let cp = shared::tier2().await.unwrap();
    let client = cp.client().await.unwrap();
    for (class, value) in [(LOW, 10), (HIGH, 1000)] {
        e2e::priority_class(&client, class, value).await.unwrap();
    }
    let hook = webhook::start_and_register(cp).await.unwrap();
    let leader = scheduler::start_leader(cp, scheduler::test_args("monitoring-scheduler"))
        .await
        .unwrap();

    // A quota of 4 CPU (min 2: a quota whose min is 0 has no min series)
    // whose queue preempts lower priorities at once.
    e2e::create_quota(&client, "mon", None, true, "4", "4", None)
        .await
        .unwrap();
    let leaf = "mon-q";
    e2e::create_quota(&client, leaf, Some("mon"), false, "2", "4", None)
        .await
        .unwrap();
    let queues: kube::Api<Queue> = kube::Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
    fixtures::eventually(Duration::from_secs(15), || async {
        Ok(queues.get_opt(leaf).await?.is_some())
    })
    .await
    .expect("the scheduler makes the quota's Queue");
    let spec =
        json!({ "spec": { "preemption": { "withinQuota": "LowerPriority", "minRunSeconds": 0 } } });
    queues
        .patch(leaf, &PatchParams::default(), &Patch::Merge(spec))
        .await
        .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    // Two low-priority jobs fill it; a high-priority one preempts one of them.
    for name in ["low-a", "low-b"] {
        kubectl_create_job(
            cp,
            &ns,
            &e2e::job_yaml_with_priority(name, leaf, "2", "1h", LOW),
        )
        .await
        .unwrap();
        wait_phase(&client, &ns, name, &[Running], LONG)
            .await
            .unwrap();
    }
    kubectl_create_job(
        cp,
        &ns,
        &e2e::job_yaml_with_priority("high", leaf, "2", "1h", HIGH),
    )
    .await
    .unwrap();
    wait_phase(&client, &ns, "high", &[Running], LONG)
        .await
        .unwrap();
    // A bare pod where jobs are queued is refused.
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": { "name": "bare" },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] },
    }))
    .unwrap();
    let refused = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &pod)
        .await;
    assert!(refused.is_err(), "a bare pod is refused: {refused:?}");

    // The scheduler publishes its gauges every status interval.
    let missing = std::sync::Mutex::new(String::new());
    let waited = fixtures::eventually(Duration::from_secs(30), || {
        let (used, missing) = (&used, &missing);
        async move {
            let scheduler_text = metrics::scrape(leader.admin_addr).await?;
            let webhook_text = metrics::scrape(hook.admin_addr).await?;
            let exposed: BTreeSet<String> = sample_names(&scheduler_text)
                .union(&sample_names(&webhook_text))
                .cloned()
                .collect();
            let absent: Vec<String> = used
                .iter()
                .filter(|(name, _)| !exposed.contains(*name) && !PROMETHEUS_OWN.contains(&name.as_str()))
                .map(|(name, places)| format!("{name} (used by {})", places.join("; ")))
                .collect();
            // The label values the alerts key on are there too.
            let keyed = [
                metrics::sample(
                    &scheduler_text,
                    "koord_queue_scheduler_admission_attempts_total",
                    &[("result", "released")],
                ),
                metrics::sample(
                    &scheduler_text,
                    "koord_queue_scheduler_preemptions_total",
                    &[("reason", "Preempted")],
                ),
            ];
            let denied = webhook_text.lines().any(|l| {
                l.starts_with("koord_queue_webhook_reviews_total{")
                    && l.contains(r#"verdict="denied""#)
            });
            let mut m = missing.lock().unwrap();
            *m = format!(
                "not exposed: {absent:#?}; released and preempted samples: {keyed:?}; a denied review: {denied}"
            );
            Ok(absent.is_empty() && keyed.iter().all(|v| v.is_some_and(|v| v >= 1.0)) && denied)
        }
    })
    .await;
    waited.unwrap_or_else(|e| panic!("{e:#}: {}", missing.lock().unwrap()));

    // `up` is only read by the alerts that a component is down.
    for own in PROMETHEUS_OWN {
        for place in used.get(*own).into_iter().flatten() {
            assert!(place.ends_with("Down"), "{own} is used by {place}");
        }
    }
}
