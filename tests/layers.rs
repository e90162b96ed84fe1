//! The engine layer's imports, read from its sources: no module under `src/engine/` reaches up
//! (to the GPU engine, device selection, Arrow front ends or the command line), and the engine
//! modules import each other without a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each engine module and the sibling modules it names through `super::`.
fn engine_imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "mod" {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        // Unit tests may reach anywhere; the module's own code is what is layered.
        let code = source.split("#[cfg(test)]").next().unwrap();
        let mut uses = BTreeSet::new();
        for (i, _) in code.match_indices("super::") {
            let rest = &code[i + "super::".len()..];
            let word: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !word.is_empty() && rest[word.len()..].starts_with("::") {
                uses.insert(word);
            }
        }
        modules.insert(name, uses);
    }
    modules
}

#[test]
fn no_engine_module_reaches_above_the_engine_layer() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let source = std::fs::read_to_string(&path).unwrap();
        for above in [
            "crate::gpu",
            "crate::device",
            "crate::batch",
            "crate::features",
            "crate::layout",
            "crate::explain",
            "crate::sql",
            "crate::flight",
            "clap::",
            "arrow::",
        ] {
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

/// The crate's modules from the bottom up: a module may import its own layer and those below,
/// never one above. Modules on one line are one layer.
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["model"],
    &["engine"],
    &["gpu"],
    &["device"],
    &["features", "layout", "batch", "settings"],
    &["explainer"],
    &["atomic_file", "input", "explain", "plot"],
    &["io_runtime"],
    &["registry"],
    &["explainers", "call"],
    &["sql"],
    &["net"],
    &["flight"],
    &["ballista"],
    &["shell", "serve"],
    &["cli", "main"],
];

/// Pairs in one layer that must not import each other either: (importer, imported).
const APART: &[(&str, &str)] = &[("shell", "serve"), ("serve", "shell"), ("explainers", "call")];

/// The top module a source file belongs to (`src/flight/pool.rs` → `flight`).
fn top_module(path: &Path, src: &Path) -> String {
    let relative = path.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crate modules a file's own code (not its unit tests or comments) names as
/// `crate::<module>` or, in the binary's files, `shapfusion::<module>`.
fn crate_imports(source: &str, prefix: &str) -> BTreeSet<String> {
    let code = source.split("#[cfg(test)]\nmod tests").next().unwrap();
    let code: String = code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        // `shapfusion::` inside a longer word (`crate_shapfusion::`) is not ours.
        if i > 0 && code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let word: String = code[i + prefix.len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !word.is_empty() {
            found.insert(word);
        }
    }
    found
}

#[test]
fn every_module_imports_only_its_own_layer_and_those_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer_of = |module: &str| LAYERS.iter().position(|l| l.contains(&module));
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut checked = 0;
    for path in &files {
        let module = top_module(path, &src);
        if matches!(module.as_str(), "lib" | "test_fixtures" | "test_support") {
            continue;
        }
        let here = layer_of(&module).unwrap_or_else(|| panic!("{}: module {module} is in no layer of tests/layers.rs", path.display()));
        let source = std::fs::read_to_string(path).unwrap();
        let prefix = if matches!(module.as_str(), "cli" | "main") { "shapfusion::" } else { "crate::" };
        for imported in crate_imports(&source, prefix) {
            // Fixtures and builders for unit tests, compiled only with them.
            if matches!(imported.as_str(), "test_fixtures" | "test_support") {
                continue;
            }
            let Some(there) = layer_of(&imported) else {
                // Root re-exports (`crate::Result`, `shapfusion::Explainer`) are below everything.
                assert!(imported.chars().next().unwrap().is_uppercase(), "{}: imports unknown module {imported}", path.display());
                continue;
            };
            assert!(there <= here, "{} (layer {module}) imports {imported}, a layer above it", path.display());
            assert!(!APART.contains(&(module.as_str(), imported.as_str())), "{} ({module}) must not import {imported}", path.display());
            checked += 1;
        }
    }
    assert!(checked > 100, "too few imports found ({checked}): is the parser still reading the sources?");
}

#[test]
fn sql_reaches_workers_through_its_own_trait_and_the_store_is_only_a_store() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src.join("sql"), &mut files);
    assert!(files.len() >= 5, "sql sources not found");
    for path in &files {
        let source = std::fs::read_to_string(path).unwrap();
        let source: String = source.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
        for above in ["crate::flight", "crate::net", "crate::serve", "crate::ballista", "arrow_flight", "tonic::"] {
            assert!(!source.contains(above), "{} uses {above}: SQL reaches workers through sql::RemoteCompute only", path.display());
        }
    }
    let registry = std::fs::read_to_string(src.join("registry.rs")).unwrap();
    let registry: String = registry.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    for other in ["crate::engine", "crate::device", "crate::explainer", "Explainer", "crate::input", "tokio::runtime::Builder"] {
        assert!(!registry.contains(other), "registry.rs uses {other}: the store resolves, loads and versions, nothing else");
    }
}

#[test]
fn library_errors_name_no_command_line_flag() {
    // The command line says which flag fixes an error; the library says what is wrong.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut offenders = Vec::new();
    for path in &files {
        let module = top_module(path, &src);
        if matches!(module.as_str(), "cli" | "main") {
            continue;
        }
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
    assert!(offenders.is_empty(), "library code names command-line flags:\n{}", offenders.join("\n"));
}
