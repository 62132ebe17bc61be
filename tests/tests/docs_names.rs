//! The front door names what exists: every file, function, type, flag,
//! crate and make target that `docs/architecture.md` names is in the tree,
//! every "architecture §N" a comment or a page cites is a section of it, and
//! the README's Commands table lists every make target with a help line.
//! Names go stale silently when code moves; this reads them all. No cluster
//! needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file and directory of the tree (relative, `/`-separated; build
/// output and hidden entries left out), and the text of the Rust sources.
struct Tree {
    paths: BTreeSet<String>,
    rust: Vec<(String, String)>,
    /// Names the Rust sources define: functions, types, traits, modules
    /// (and their files), constants, macros, fields and variants.
    defined: BTreeSet<String>,
    /// Every identifier-like word of the Rust sources, strings included
    /// (a kind derived by `kube` is named only in its `kind = "..."`).
    words: BTreeSet<String>,
}

static TREE: LazyLock<Tree> = LazyLock::new(|| {
    let root = workspace();
    let mut paths = BTreeSet::new();
    let mut rust = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if path.is_dir() {
                paths.insert(format!("{rel}/"));
                dirs.push(path);
            } else {
                // This file names what does not exist, on purpose: its
                // words are not the code's.
                if rel.ends_with(".rs") && rel != "tests/tests/docs_names.rs" {
                    rust.push((rel.clone(), std::fs::read_to_string(&path).unwrap()));
                }
                paths.insert(rel);
            }
        }
    }
    static DEFINITION: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?m)\b(?:fn|struct|enum|trait|type|mod|const|static|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)|^\s*(?:pub(?:\([a-z]+\))?\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^:]|,|\(|\{|$)",
        )
        .unwrap()
    });
    let mut defined = BTreeSet::new();
    let mut words = BTreeSet::new();
    for (path, src) in &rust {
        for c in DEFINITION.captures_iter(src) {
            if let Some(m) = c.get(1).or_else(|| c.get(2)) {
                defined.insert(m.as_str().to_string());
            }
        }
        let stem = path.trim_end_matches(".rs").trim_end_matches("/mod");
        defined.insert(stem.rsplit('/').next().unwrap_or_default().to_string());
        words.extend(
            src.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_string),
        );
    }
    Tree {
        paths,
        rust,
        defined,
        words,
    }
});

fn read(rel: &str) -> String {
    std::fs::read_to_string(workspace().join(rel)).unwrap()
}

/// Whether a file or directory of the tree is `name` or ends with
/// `/name` (the page names files relative to the part it describes).
fn path_exists(name: &str) -> bool {
    let names = if name.ends_with('/') {
        vec![name.to_string()]
    } else {
        vec![name.to_string(), format!("{name}/")]
    };
    TREE.paths.iter().any(|p| {
        names
            .iter()
            .any(|n| p == n || p.ends_with(&format!("/{n}")))
    })
}

/// Whether some Rust source defines `name`; a type-like name (`QueueUnit`,
/// `Reclaimed`) may also be one the code only spells (a derived kind, a
/// reason string).
fn defined(name: &str) -> bool {
    TREE.defined.contains(name)
        || (name.starts_with(|c: char| c.is_ascii_uppercase()) && TREE.words.contains(name))
}

/// The inline code spans of a Markdown page.
fn code_spans(page: &str) -> Vec<String> {
    static SPAN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`([^`\n]+)`").unwrap());
    SPAN.captures_iter(page).map(|c| c[1].to_string()).collect()
}

/// What one code span names, if it names something this test can look up.
#[derive(Debug, PartialEq)]
enum Named {
    /// A path of the tree (`api/src/jobs/mod.rs`, `state/decide.rs`, `core/`).
    Path(String),
    /// A code item, by its path (`decide::next_step`, `adapter.hold`, `Core`).
    Item(Vec<String>),
    /// A command-line flag (`--cycle-batch`).
    Flag(String),
    /// A crate of the workspace (`koord-queue-core`).
    Crate(String),
    /// A make target (`make crds`).
    Target(String),
}

/// Words in code spans that are values or roles, not names of the code.
const NOT_CODE: &[&str] = &[
    "edit", "n", "unknown", "core", "size", "state", "hold", "release",
];

fn classify(
    span: &str,
    top_level: &BTreeSet<String>,
    external: &BTreeSet<String>,
) -> Option<Named> {
    static ITEM: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^[A-Za-z_][A-Za-z0-9_]*((::|\.)[A-Za-z_][A-Za-z0-9_]*)*(\(\))?$").unwrap()
    });
    static PATH: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?$").unwrap());
    let span = span.trim();
    if let Some(target) = span.strip_prefix("make ") {
        return Some(Named::Target(target.to_string()));
    }
    if let Some(flag) = span.strip_prefix("--") {
        return flag
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '-')
            .then(|| Named::Flag(flag.to_string()));
    }
    if span.starts_with("koord-queue-") && !span.contains(['/', ' ']) {
        return Some(Named::Crate(span.to_string()));
    }
    if PATH.is_match(span) && (span.contains('/') || span.ends_with(".rs")) {
        let first = span.split('/').next().unwrap_or("");
        let has_extension = [".rs", ".md", ".yaml", ".sh", ".toml"]
            .iter()
            .any(|e| span.ends_with(e));
        if has_extension || top_level.contains(first) {
            return Some(Named::Path(span.to_string()));
        }
        // A label, an API group or resource, a URL path: not the tree's.
        return None;
    }
    if ITEM.is_match(span) {
        let first = span.split([':', '.']).next().unwrap_or_default();
        let camel_field = first.starts_with(|c: char| c.is_ascii_lowercase())
            && span
                .split('.')
                .any(|s| s.chars().any(|c| c.is_ascii_uppercase()))
            && !span.contains("::");
        if NOT_CODE.contains(&span) || camel_field || external.contains(first) {
            // A value, an API field (`spec.reserveHead`), another crate's item.
            return None;
        }
        let path = span
            .trim_end_matches("()")
            .split("::")
            .flat_map(|s| s.split('.'))
            .map(str::to_string)
            .collect();
        return Some(Named::Item(path));
    }
    None
}

/// What of `page` does not exist, one line each.
fn stale_names(page: &str) -> Vec<String> {
    let top_level: BTreeSet<String> = TREE
        .paths
        .iter()
        .filter_map(|p| p.strip_suffix('/'))
        .filter(|p| !p.contains('/'))
        .map(str::to_string)
        .collect();
    let makefile = read("Makefile");
    let crates: Vec<String> = TREE
        .paths
        .iter()
        .filter(|p| p.ends_with("Cargo.toml"))
        .map(|p| read(p))
        .collect();
    // The dependencies' names as code spells them (`json_patch`).
    let external: BTreeSet<String> = crates
        .iter()
        .flat_map(|m| m.lines())
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
        .filter(|k| !k.starts_with("koord-queue") && !k.contains(['.', ' ', '[', '"']))
        .map(|k| k.replace('-', "_"))
        .collect();
    let mut stale = Vec::new();
    for span in code_spans(page) {
        let ok = match classify(&span, &top_level, &external) {
            None => true,
            Some(Named::Path(p)) => path_exists(&p),
            // `adapter.hold`: the variable is no definition, the member is;
            // `decide::next_step`: the module and the function both are.
            Some(Named::Item(path)) if span.contains('.') => {
                path.last().is_some_and(|s| defined(s))
            }
            Some(Named::Item(path)) => path.iter().all(|s| defined(s)),
            Some(Named::Flag(f)) => {
                let field = f.replace('-', "_");
                TREE.rust.iter().any(|(_, src)| {
                    src.contains(&format!("--{f}"))
                        || src.contains(&format!("pub {field}:"))
                        || src.contains(&format!(" {field}:"))
                })
            }
            Some(Named::Crate(c)) => crates
                .iter()
                .any(|m| m.contains(&format!("name = \"{c}\""))),
            Some(Named::Target(t)) => makefile.lines().any(|l| l.starts_with(&format!("{t}:"))),
        };
        if !ok {
            stale.push(span);
        }
    }
    stale.sort();
    stale.dedup();
    stale
}

#[test]
fn every_name_in_the_architecture_page_exists() {
    let page = read("docs/architecture.md");
    assert!(code_spans(&page).len() > 200, "code spans not read");
    assert_eq!(
        stale_names(&page),
        Vec::<String>::new(),
        "stale names in docs/architecture.md"
    );
}

#[test]
fn the_checker_finds_a_stale_name_of_every_kind() {
    let page = "`core/src/engine/` `core/src/no_such.rs` `Core::run_cycle` `decide::no_such_step` \
        `adapter.hold_release_patches` `NoSuchType` `--cycle-batch` `--no-such-flag` \
        `koord-queue-core` `koord-queue-nothing` `make crds` `make nothing` \
        `koord-queue/queued` `edit` `ray.io/cluster`";
    assert_eq!(
        stale_names(page),
        [
            "--no-such-flag",
            "NoSuchType",
            "adapter.hold_release_patches",
            "core/src/no_such.rs",
            "decide::no_such_step",
            "koord-queue-nothing",
            "make nothing",
        ]
    );
}

/// The sections of the page: number → header and body.
fn sections(page: &str) -> Vec<(String, String, String)> {
    static HEADER: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?m)^#{2,3} (§([0-9.]+) )?(.+)$").unwrap());
    let starts: Vec<_> = HEADER.captures_iter(page).collect();
    starts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let start = c.get(0).unwrap().end();
            let end = starts
                .get(i + 1)
                .map_or(page.len(), |n| n.get(0).unwrap().start());
            let number = c.get(2).map_or("", |m| m.as_str()).to_string();
            (number, c[3].to_string(), page[start..end].to_string())
        })
        .collect()
}

#[test]
fn every_cited_section_exists() {
    static CITE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"architecture(?:\.md)? §([0-9]+(?:\.[0-9]+)?)(?: "([^"]+)")?"#).unwrap()
    });
    let sections = sections(&read("docs/architecture.md"));
    assert!(sections.len() > 10, "sections not read");
    let mut texts: Vec<(String, String)> = TREE.rust.clone();
    for p in TREE.paths.iter().filter(|p| p.ends_with(".md")) {
        texts.push((p.clone(), read(p)));
    }
    let mut stale = Vec::new();
    let mut cites = 0;
    for (path, text) in &texts {
        for c in CITE.captures_iter(
            &text
                .replace("\n", " ")
                .replace("/// ", "")
                .replace("//! ", "")
                .replace("// ", ""),
        ) {
            cites += 1;
            let number = &c[1];
            let found = sections.iter().find(|(n, _, _)| n == number);
            let ok = match (found, c.get(2)) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some((_, header, body)), Some(title)) => {
                    header.contains(title.as_str()) || body.contains(title.as_str())
                }
            };
            if !ok {
                stale.push(format!("{path}: {}", &c[0]));
            }
        }
    }
    assert!(cites > 50, "{cites} citations read");
    assert_eq!(stale, Vec::<String>::new());
}

#[test]
fn the_readme_lists_every_make_target() {
    let readme = read("README.md");
    let makefile = read("Makefile");
    let targets: Vec<&str> = makefile
        .lines()
        .filter(|l| l.contains(":") && l.contains("## "))
        .filter_map(|l| l.split(':').next())
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .collect();
    assert!(targets.len() > 10, "targets not read: {targets:?}");
    // One table: its rows are consecutive lines starting with `|`.
    let table: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("| `make"))
        .take_while(|l| l.starts_with('|'))
        .collect();
    let missing: Vec<&&str> = targets
        .iter()
        .filter(|t| !table.iter().any(|row| row.contains(&format!("`make {t}"))))
        .collect();
    assert_eq!(
        missing,
        Vec::<&&str>::new(),
        "make targets missing from the README's Commands table (one table, no blank line)"
    );
}

#[test]
fn the_readme_names_every_supported_kind() {
    let readme = read("README.md");
    let supported = readme
        .split("\n\n")
        .find(|p| p.starts_with("Supported jobs"))
        .expect("the README's \"Supported jobs\" paragraph")
        .replace('\n', " ");
    let kinds: Vec<&str> = koord_queue_api::jobs::registry::all()
        .iter()
        .map(|a| a.kind().kind)
        .collect();
    assert!(kinds.len() > 10, "{kinds:?}");
    let missing: Vec<&&str> = kinds.iter().filter(|k| !supported.contains(*k)).collect();
    assert_eq!(
        missing,
        Vec::<&&str>::new(),
        "kinds missing from: {supported}"
    );
}

/// The wait reasons are one list: every type the API answers is explained
/// in the API's page and in the troubleshooting page.
#[test]
fn every_wait_type_is_documented() {
    let reference = read("docs/visibility.md");
    let troubleshooting = read("docs/troubleshooting.md");
    let missing: Vec<&str> = koord_queue_visibility::WaitType::ALL
        .iter()
        .map(|t| t.as_str())
        .filter(|t| !reference.contains(&format!("| `{t}` |")))
        .collect();
    assert_eq!(
        missing,
        Vec::<&str>::new(),
        "missing from docs/visibility.md's table"
    );
    // The troubleshooting table names each type a person meets by the
    // message they see.
    for t in [
        "QuotaExceeded",
        "ClusterCapacity",
        "BehindHead",
        "BehindReservingHead",
        "Reserving",
        "NamespaceQuota",
        "AdmissionChecks",
        "Backoff",
        "NotYetSeen",
        "QueueStopped",
    ] {
        assert!(
            troubleshooting.contains(t),
            "{t} missing from docs/troubleshooting.md"
        );
    }
}
