//! The controller's state machine never reads a clock (issue 38): the run
//! loop reads the time once per input and hands it in (`controller/clock.rs`),
//! so that its decisions follow from its inputs, and tests and a simulator
//! drive time as they drive watch changes. This walks the product files of
//! `src/controller/state/` — not `tests.rs`, `*_tests.rs`, what is under a
//! `tests/` or `scenarios/` directory, nor a `#[cfg(test)] mod … { … }` block
//! — and fails on a clock read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The calls that read a clock.
const CLOCK_READS: [&str; 3] = ["Instant::now", "SystemTime::now", "Timestamp::now"];

#[test]
fn no_product_file_of_the_state_machine_reads_the_clock() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller/state");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("mod.rs")),
        "no source found under {}",
        root.display()
    );
    let mut found = Vec::new();
    for file in files.iter().filter(|f| is_product(&root, f)) {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, call) in clock_reads(&text) {
            found.push(format!("{}:{line}: {call}", file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "the state machine reads the clock (take the time from `self.now`, set by the run loop):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_clock_read_is_found_outside_test_blocks_only() {
    let text = "fn a() {\n    let t = std::time::Instant::now();\n}\n\
                #[cfg(test)]\nmod tests {\n    fn b() { let _ = Instant::now(); }\n}\n\
                fn c() { let _ = k8s_openapi::jiff::Timestamp::now(); }\n\
                // a comment on Instant::now is no read\n";
    let found: Vec<(usize, &str)> = clock_reads(text);
    assert_eq!(found, [(2, "Instant::now"), (8, "Timestamp::now")]);
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// Whether `file` is product code: not a test file, nor in a test directory.
fn is_product(root: &Path, file: &Path) -> bool {
    let relative = file.strip_prefix(root).unwrap();
    let in_test_dir = relative
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "scenarios")));
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !in_test_dir && name != "tests.rs" && !name.ends_with("_tests.rs")
}

/// The clock reads of `text` by line (1-based), outside line comments and
/// outside `#[cfg(test)] mod … {` blocks. A block's end is found by counting
/// braces, which braces in string literals could fool: a miscount can only
/// hide a read after a test module, and this crate's test modules come last.
fn clock_reads(text: &str) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    let mut cfg_test = false;
    // The depth at which a skipped test module's block closes.
    let mut skipping: Option<i64> = None;
    let mut depth: i64 = 0;
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim();
        if skipping.is_none() {
            if trimmed.starts_with("#[cfg(test)]") {
                cfg_test = true;
            } else if cfg_test && trimmed.starts_with("mod ") && trimmed.ends_with('{') {
                skipping = Some(depth);
                cfg_test = false;
            } else if !trimmed.is_empty() && !trimmed.starts_with("#[") {
                cfg_test = false;
            }
        }
        if skipping.is_none() {
            for call in CLOCK_READS {
                if code.contains(call) {
                    found.push((i + 1, call));
                }
            }
        }
        for c in code.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
        }
        if skipping.is_some_and(|d| depth <= d) {
            skipping = None;
        }
    }
    found
}
