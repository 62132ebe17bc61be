//! The structure the compiler does not check by itself (docs/architecture.md
//! §1): no module of the decision core or of the scheduler depends on a
//! module that depends back on it, and the core's crate names no kube,
//! k8s-openapi or tokio among its dependencies. No cluster needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every module of the crate rooted at `src` (tests and binaries left out),
/// by path (`a::b`), with its source.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                if rel != "bin" && !rel.ends_with("tests") {
                    dirs.push(path);
                }
                continue;
            }
            let Some(rel) = rel.strip_suffix(".rs") else {
                continue;
            };
            let mut parts: Vec<&str> = rel.split('/').collect();
            if matches!(parts.last(), Some(&"mod" | &"lib" | &"main")) {
                parts.pop();
            }
            if parts.last() == Some(&"tests") {
                continue;
            }
            out.insert(parts.join("::"), std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// The modules each module refers to through `super::` or `crate::` paths
/// (in `use` items or inline), its own ancestors left out.
fn edges(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges = BTreeMap::new();
    for (name, src) in mods {
        let parent = name.rsplit_once("::").map_or("", |(p, _)| p);
        let mut targets = BTreeSet::new();
        for line in src.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            for (start, kind) in line
                .match_indices("super::")
                .map(|(i, _)| (i + 7, "super"))
                .chain(line.match_indices("crate::").map(|(i, _)| (i + 7, "crate")))
            {
                let path: Vec<&str> = line[start..]
                    .split(|c: char| !(c.is_ascii_lowercase() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or("")
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .take(2)
                    .collect();
                let base = match (kind, parent) {
                    ("crate", _) | (_, "") => path.first().map(|s| s.to_string()),
                    _ => path.first().map(|s| format!("{parent}::{s}")),
                };
                let Some(base) = base else { continue };
                let deeper = path.get(1).map(|s| format!("{base}::{s}"));
                let target = deeper.filter(|d| mods.contains_key(d)).or(Some(base));
                if let Some(t) = target.filter(|t| mods.contains_key(t))
                    && t != *name
                    && !name.starts_with(&format!("{t}::"))
                {
                    targets.insert(t);
                }
            }
        }
        edges.insert(name.clone(), targets);
    }
    edges
}

/// The module cycles: pairs `(a, b)` where each reaches the other.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for t in edges.get(&m).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut out = Vec::new();
    for (a, ra) in &reached {
        for b in ra {
            if *a < b && reached.get(b).is_some_and(|rb| rb.contains(*a)) {
                out.push(((*a).clone(), b.clone()));
            }
        }
    }
    out
}

#[test]
fn no_module_cycles_in_the_core_or_the_scheduler() {
    for src in ["core/src", "scheduler/src"] {
        let mods = modules(&workspace().join(src));
        assert!(mods.len() > 5, "{src}: {} modules found", mods.len());
        let edges = edges(&mods);
        assert!(
            edges.values().map(BTreeSet::len).sum::<usize>() > 10,
            "{src}: no edges read"
        );
        assert_eq!(cycles(&edges), Vec::<(String, String)>::new(), "{src}");
    }
}

#[test]
fn the_detector_sees_a_cycle() {
    let mods: BTreeMap<String, String> = [
        ("a".to_string(), "use super::b::X;".to_string()),
        ("b".to_string(), "fn f() { crate::a::g() }".to_string()),
        ("c".to_string(), "use crate::a;".to_string()),
    ]
    .into();
    assert_eq!(cycles(&edges(&mods)), [("a".to_string(), "b".to_string())]);
}

/// The dependency names of `crate_dir`'s `[dependencies]` table.
fn dependencies(crate_dir: &str) -> Vec<String> {
    let manifest = std::fs::read_to_string(workspace().join(crate_dir).join("Cargo.toml")).unwrap();
    let table = manifest.split("\n[dependencies]\n").nth(1).unwrap_or("");
    table
        .split("\n[")
        .next()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split(['=', '.']).next())
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty() && !n.starts_with('#'))
        .collect()
}

#[test]
fn the_core_depends_on_no_kubernetes_client_or_runtime() {
    for crate_dir in ["core", "model"] {
        let deps = dependencies(crate_dir);
        assert!(!deps.is_empty(), "{crate_dir}: no dependencies read");
        for forbidden in ["kube", "k8s-openapi", "tokio", "koord-queue-api"] {
            assert!(
                !deps.iter().any(|d| d == forbidden),
                "{crate_dir} depends on {forbidden}: {deps:?}"
            );
        }
    }
    assert!(dependencies("core").contains(&"koord-queue-model".to_string()));
}
