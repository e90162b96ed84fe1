//! What the crates' dependency graph cannot check about the layering, read from the sources and
//! manifests: each crate depends only on the shapfusion crates below it and on none of the
//! heavy libraries its layer keeps out (checked so an added dependency fails here, not in a
//! review); inside `shapfusion-core`, modules import only their own layer and those below, and
//! the engines know no Arrow, GPU, front end or command line; the SQL layer's registry is only a
//! store; and no library crate names a command-line flag.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's own code: without its unit tests and comment lines.
fn code_of(path: &Path) -> String {
    let source = std::fs::read_to_string(path).unwrap();
    let code = source.split("#[cfg(test)]\nmod tests").next().unwrap();
    code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The `[dependencies]` of a manifest (not dev-dependencies), by name.
fn dependencies(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut in_section = false;
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_section = t == "[dependencies]";
            continue;
        }
        if in_section && !t.is_empty() && !t.starts_with('#') {
            names.insert(t.split(['=', ' ']).next().unwrap().to_string());
        }
    }
    names
}

/// The library crates from the bottom up, each with the heavy dependencies its layer must not
/// take (they belong to the layers above).
const CRATES: &[(&str, &[&str])] = &[
    ("core", &["datafusion", "tokio", "parquet", "tonic", "object_store", "arrow-flight", "ballista", "clap"]),
    ("files", &["datafusion", "tokio", "tonic", "object_store", "arrow-flight", "ballista", "clap"]),
    ("plot", &["datafusion", "tokio", "tonic", "object_store", "arrow-flight", "ballista", "clap"]),
    ("sql", &["tonic", "arrow-flight", "ballista", "ballista-core", "hyper", "clap"]),
    ("flight", &["ballista", "ballista-core", "ballista-executor", "ballista-scheduler", "clap"]),
    ("ballista", &["clap"]),
];

#[test]
fn each_crate_depends_only_on_the_crates_below_it_and_not_on_the_layers_above() {
    let position = |name: &str| CRATES.iter().position(|(c, _)| format!("shapfusion-{c}") == name);
    for (i, (name, forbidden)) in CRATES.iter().enumerate() {
        let deps = dependencies(&root().join("crates").join(name).join("Cargo.toml"));
        assert!(deps.contains("arrow") || *name == "ballista", "shapfusion-{name}: dependencies not read: {deps:?}");
        for dep in &deps {
            if let Some(j) = position(dep) {
                // plot sits beside sql: both build on files and core only.
                let below = j < i && !(CRATES[j].0 == "plot" && *name != "plot");
                assert!(below, "shapfusion-{name} depends on {dep}, which is not below it");
            }
            assert!(!forbidden.contains(&dep.as_str()), "shapfusion-{name} depends on {dep}, which its layer keeps out");
        }
    }
    // The core is what the Python wheel and the fuzzers build: the engines and readers, nothing
    // of the servers.
    let core = dependencies(&root().join("crates/core/Cargo.toml"));
    assert!(core.iter().all(|d| !d.starts_with("shapfusion")), "shapfusion-core depends on {core:?}");
}

/// `shapfusion-core`'s modules from the bottom up: a module may import its own layer and those
/// below, never one above. Modules on one line are one layer.
const CORE_LAYERS: &[&[&str]] = &[
    &["error", "expected_panic"],
    &["model"],
    &["engine"],
    &["gpu"],
    &["device"],
    &["features", "layout", "batch", "compute_pool", "settings"],
    &["explainer", "small_calls"],
];

/// The crate modules a file's own code names as `crate::<module>`.
fn crate_imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let word: String = code[i + "crate::".len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !word.is_empty() {
            found.insert(word);
        }
    }
    found
}

#[test]
fn every_core_module_imports_only_its_own_layer_and_those_below() {
    let src = root().join("crates/core/src");
    let layer_of = |module: &str| CORE_LAYERS.iter().position(|l| l.contains(&module));
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut checked = 0;
    for path in &files {
        let relative = path.strip_prefix(&src).unwrap();
        let module = relative.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if matches!(module.as_str(), "lib" | "test_fixtures" | "test_support") {
            continue;
        }
        let here = layer_of(&module).unwrap_or_else(|| panic!("{}: module {module} is in no layer of tests/layers.rs", path.display()));
        for imported in crate_imports(&code_of(path)) {
            if matches!(imported.as_str(), "test_fixtures" | "test_support") {
                continue;
            }
            let Some(there) = layer_of(&imported) else {
                // Root re-exports (`crate::Result`) are below everything.
                assert!(imported.chars().next().unwrap().is_uppercase(), "{}: imports unknown module {imported}", path.display());
                continue;
            };
            assert!(there <= here, "{} (layer {module}) imports {imported}, a layer above it", path.display());
            checked += 1;
        }
    }
    assert!(checked > 50, "too few imports found ({checked}): is the parser still reading the sources?");
}

/// Each engine module and the sibling modules it names (through `super::` from its own file,
/// or `crate::engine::` from it or the files of its child modules, `engine/<module>/*.rs`).
fn engine_imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = root().join("crates/core/src/engine");
    let mut files = Vec::new();
    sources(&dir, &mut files);
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in files {
        let inside = path.strip_prefix(&dir).unwrap();
        // `engine/x.rs` is module x; `engine/x/y.rs` is a child of x, whose `super::` is x.
        let name = inside.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_string();
        if name == "mod" {
            continue;
        }
        let prefixes: &[&str] = if inside.components().count() == 1 { &["super::", "crate::engine::"] } else { &["crate::engine::"] };
        let source = std::fs::read_to_string(&path).unwrap();
        // Unit tests may reach anywhere; the module's own code is what is layered.
        let code = source.split("#[cfg(test)]").next().unwrap();
        let uses = modules.entry(name).or_default();
        for prefix in prefixes {
            for (i, _) in code.match_indices(prefix) {
                let rest = &code[i + prefix.len()..];
                let word: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !word.is_empty() && rest[word.len()..].starts_with("::") {
                    uses.insert(word);
                }
            }
        }
    }
    modules
}

#[test]
fn no_engine_module_reaches_above_the_engine_layer() {
    let mut files = Vec::new();
    sources(&root().join("crates/core/src/engine"), &mut files);
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        for above in ["crate::gpu", "crate::device", "crate::batch", "crate::features", "crate::layout", "crate::explainer", "arrow::"] {
            assert!(!source.contains(above), "{} uses {above}: the engine layer knows only models and its own modules", path.display());
        }
        for flag in ["--device", "--batch-rows", "--algorithm", "--threads"] {
            assert!(
                !source.contains(flag),
                "{} names the CLI flag {flag}: say what is wrong, the front end says which flag fixes it",
                path.display()
            );
        }
    }
}

#[test]
fn engine_modules_import_each_other_without_a_cycle() {
    let graph = engine_imports();
    assert!(graph.len() >= 10, "engine modules not found: {graph:?}");
    // Depth-first search for a back edge.
    fn visit(node: &str, graph: &BTreeMap<String, BTreeSet<String>>, state: &mut BTreeMap<String, u8>, stack: &mut Vec<String>) {
        match state.get(node) {
            Some(2) => return,
            Some(1) => panic!("import cycle among engine modules: {} -> {node}", stack.join(" -> ")),
            _ => {}
        }
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if graph.contains_key(next) {
                visit(next, graph, state, stack);
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        visit(node, &graph, &mut state, &mut Vec::new());
    }
    // And no module imports the parent's re-exports instead of the module that defines them.
    for (module, uses) in &graph {
        assert!(uses.iter().all(|u| graph.contains_key(u)), "{module} imports {uses:?}; name the defining module");
    }
}

#[test]
fn the_model_store_is_only_a_store() {
    let registry = code_of(&root().join("crates/sql/src/registry.rs"));
    for other in ["shapfusion_core::engine", "shapfusion_core::Device", "Explainer", "shapfusion_files::input", "tokio::runtime::Builder"] {
        assert!(!registry.contains(other), "registry.rs uses {other}: the store resolves, loads and versions, nothing else");
    }
}

#[test]
fn library_errors_name_no_command_line_flag() {
    // The command line says which flag fixes an error; the library says what is wrong.
    // The crates' library code (`src/`); their examples are programs with their own flags.
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).unwrap() {
        sources(&krate.unwrap().path().join("src"), &mut files);
    }
    let mut offenders = Vec::new();
    for path in &files {
        let source = std::fs::read_to_string(path).unwrap();
        let code = source.split("#[cfg(test)]\nmod tests").next().unwrap();
        for (n, line) in code.lines().enumerate() {
            let t = line.trim_start();
            // NVRTC's own compiler options are not ours.
            if t.starts_with("//") || t.starts_with("#[") || t.contains("\"--gpu-architecture") {
                continue;
            }
            // A flag in a string literal: `"... --name ..."`.
            let in_string = line.split('"').skip(1).step_by(2).any(|s| {
                s.match_indices("--").any(|(i, _)| {
                    s[i + 2..].chars().next().is_some_and(|c| c.is_ascii_lowercase()) && (i == 0 || !s[..i].ends_with(|c: char| c.is_alphanumeric()))
                })
            });
            if in_string {
                offenders.push(format!("{}:{}: {}", path.display(), n + 1, t));
            }
        }
    }
    assert!(files.len() > 60, "too few sources found ({})", files.len());
    assert!(offenders.is_empty(), "library code names command-line flags:\n{}", offenders.join("\n"));
}
