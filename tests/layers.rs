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
        for above in ["crate::gpu", "crate::device", "crate::batch", "crate::features", "crate::layout", "crate::explain", "crate::sql", "crate::flight", "clap::", "arrow::"] {
            assert!(!source.contains(above), "{} uses {above}: the engine layer knows only models and its own modules", path.display());
        }
        for flag in ["--device", "--batch-rows", "--algorithm", "--threads"] {
            assert!(!source.contains(flag), "{} names the CLI flag {flag}: say what is wrong, the front end says which flag fixes it", path.display());
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
