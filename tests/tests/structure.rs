//! The structure the compiler does not check by itself (docs/architecture.md
//! §1): no module of a crate depends on a module that depends back on it,
//! no product module imports by glob (a glob hides which modules it uses,
//! from the reader and from this check), and the core's crate names no kube,
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

/// The crates whose modules are checked.
const CRATES: [&str; 9] = [
    "core/src",
    "scheduler/src",
    "api/src",
    "webhook/src",
    "bench/src",
    "certs/src",
    "visibility/src",
    "sim/src",
    "cli/src",
];

#[test]
fn no_module_cycles_in_any_crate() {
    for src in CRATES {
        let mods = modules(&workspace().join(src));
        assert!(mods.len() > 3, "{src}: {} modules found", mods.len());
        let edges = edges(&mods);
        assert!(
            edges.values().map(BTreeSet::len).sum::<usize>() > 3,
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

/// The glob imports (`use a::b::*;`) of a module's source outside its test
/// modules (`#[cfg(test)]` and what follows it to the end of the file is
/// left out: test modules come last and may glob their parent).
fn globs(src: &str) -> Vec<String> {
    let product = src.split("#[cfg(test)]").next().unwrap_or(src);
    let mut out = Vec::new();
    let mut statement = String::new();
    for line in product.lines().map(str::trim) {
        if line.starts_with("//") {
            continue;
        }
        if statement.is_empty()
            && !(line.starts_with("use ")
                || line.starts_with("pub use ")
                || line.starts_with("pub(crate) use "))
        {
            continue;
        }
        statement.push_str(line);
        if line.ends_with(';') {
            if statement.contains("::*") || statement.contains("::{*") || statement.contains(", *")
            {
                out.push(std::mem::take(&mut statement));
            }
            statement.clear();
        }
    }
    out
}

#[test]
fn no_product_module_imports_by_glob() {
    let mut found = Vec::new();
    for src in CRATES {
        for (module, text) in modules(&workspace().join(src)) {
            found.extend(
                globs(&text)
                    .into_iter()
                    .map(|g| format!("{src}: {module}: {g}")),
            );
        }
    }
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn the_glob_reader_sees_globs_outside_tests_only() {
    let src = "use a::b::*;\nuse c::{d, *};\nuse e::f;\npub use g::{\n    h::*,\n};\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    assert_eq!(
        globs(src),
        ["use a::b::*;", "use c::{d, *};", "pub use g::{h::*,};"]
    );
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
