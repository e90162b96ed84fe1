//! Crafted models: files that are well-formed but lie about their counts, indices, nesting or
//! depth. Each once aborted the process (allocation failure, stack overflow, a panic on a float
//! used as an index) or was silently misread; each must now be a clear error naming the file,
//! with the process carrying on. The small corpus is committed (`tests/make_crafted_models.py`
//! writes it, with the expected messages in `EXPECTED.tsv`); the large cases are built here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use shapfusion::engine::{auto_choice, build_engine, Algorithm, EngineOptions, FeatureBlock, MAX_RECURSIVE_DEPTH};
use shapfusion::model::Model;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crafted")
}

/// (file, expected error substring; empty when the model must load).
fn corpus() -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string(corpus_dir().join("EXPECTED.tsv")).unwrap();
    let cases: Vec<_> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (file, expected) = l.split_once('\t').unwrap();
            (corpus_dir().join(file), expected.to_string())
        })
        .collect();
    assert!(cases.len() >= 20, "the corpus lost its cases: {}", cases.len());
    cases
}

#[test]
fn every_crafted_model_is_a_clear_error_naming_the_file() {
    for (path, expected) in corpus() {
        let result = Model::load(&path);
        if expected.is_empty() {
            let model = result.unwrap_or_else(|e| panic!("{} should load: {e}", path.display()));
            assert!(!model.trees().is_empty());
            continue;
        }
        let e = result.err().unwrap_or_else(|| panic!("{} loaded, expected an error with {expected:?}", path.display())).to_string();
        assert!(e.contains(&expected), "{}: {e:?} lacks {expected:?}", path.display());
        assert!(e.contains(path.file_name().unwrap().to_str().unwrap()), "error does not name the file: {e}");
    }
}

#[test]
fn models_inspect_and_explain_refuse_crafted_models_without_crashing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rows.csv");
    std::fs::write(&input, "f0,f1,x,colour\n0.25,1,0.5,3\n0.75,2,0.1,1\n").unwrap();
    let output = dir.path().join("out.parquet");
    for (path, expected) in corpus() {
        let inspect = Command::new(env!("CARGO_BIN_EXE_shapfusion")).args(["models", "inspect"]).arg(&path).output().unwrap();
        let explain = Command::new(env!("CARGO_BIN_EXE_shapfusion"))
            .args(["explain", "--no-progress", "--model"])
            .arg(&path)
            .arg("--input")
            .arg(&input)
            .arg("--output")
            .arg(&output)
            .output()
            .unwrap();
        for (what, out) in [("models inspect", inspect), ("explain", explain)] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if expected.is_empty() {
                assert!(out.status.success(), "{what} {}: {stderr}", path.display());
            } else {
                // An error reported exits with its kind's status: 65 bad data, 75 a bound reached,
                // 78 not supported; a crash would be a signal or 101, a bug 70.
                assert!(matches!(out.status.code(), Some(65 | 75 | 78)), "{what} {}: {:?} {stderr}", path.display(), out.status);
                assert!(stderr.contains(&expected), "{what} {}: {stderr}", path.display());
            }
        }
    }
}

#[test]
fn a_megabyte_of_nested_ubjson_is_refused() {
    let mut bytes = b"{i\x07learner".to_vec();
    bytes.extend(std::iter::repeat_n(b'[', 1 << 20));
    let e = Model::from_bytes(&bytes, "nested.ubj").unwrap_err().to_string();
    assert!(e.contains("nested.ubj") && e.contains("nested more than 128"), "{e}");
    // The same in JSON (serde_json's own limit).
    let mut bytes = b"{\"learner\": ".to_vec();
    bytes.extend(std::iter::repeat_n(b'[', 1 << 20));
    let e = Model::from_bytes(&bytes, "nested.json").unwrap_err().to_string();
    assert!(e.contains("nested.json") && e.contains("recursion limit"), "{e}");
}

/// An XGBoost JSON model that is one chain of `depth` splits over `features` features: split k
/// tests feature k % features against k, goes left to split k+1 and right to a leaf.
fn chain_model(depth: usize, features: usize) -> Vec<u8> {
    let n = 2 * depth + 1;
    let (mut left, mut right, mut feature, mut cond, mut cover) = (vec![], vec![], vec![], vec![], vec![]);
    for i in 0..n {
        if i < depth {
            // Internal node i: left child i+1 (the next split, or the last leaf), right a leaf.
            left.push(if i + 1 < depth { (i + 1) as i64 } else { (2 * depth) as i64 });
            right.push((depth + i) as i64);
            feature.push(i % features);
            cond.push(i as f64 + 0.5);
            cover.push((depth - i + 1) as f64);
        } else {
            left.push(-1);
            right.push(-1);
            feature.push(0);
            cond.push(((i * 7919) % 13) as f64 - 6.0);
            cover.push(1.0);
        }
    }
    let zeros = vec![0; n];
    let tree = serde_json::json!({
        "left_children": left, "right_children": right, "split_indices": feature,
        "split_conditions": cond, "default_left": zeros, "sum_hessian": cover, "split_type": zeros,
        "categories": [], "categories_nodes": [], "categories_segments": [], "categories_sizes": [],
    });
    let model = serde_json::json!({
        "learner": {
            "learner_model_param": {"num_feature": features.to_string(), "num_class": "0", "base_score": "5E-1"},
            "objective": {"name": "reg:squarederror"},
            "gradient_booster": {"name": "gbtree", "model": {"trees": [tree], "tree_info": [0]}},
        }
    });
    serde_json::to_vec(&model).unwrap()
}

fn rows(model: &Model, count: usize) -> FeatureBlock {
    let features = model.num_features();
    let values = (0..count).flat_map(|r| (0..features).map(move |f| ((r * 37 + f * 101) % 1000) as f64 * 2.0)).collect();
    model.feature_block_from_values(count, values).unwrap()
}

#[test]
fn a_chain_of_100000_splits_is_refused_by_the_recursive_engines_and_explained_by_linear() {
    let model = Arc::new(Model::from_bytes(&chain_model(100_000, 2), "chain.json").unwrap());
    assert_eq!(model.summary().max_depth, 100_000);
    let options = EngineOptions::default();
    for algorithm in [Algorithm::TreeShap, Algorithm::FastV1, Algorithm::FastV2, Algorithm::Quadrature] {
        let e = build_engine(model.clone(), algorithm, None, &options).err().expect("refused").to_string();
        assert!(e.contains(algorithm.name()) && e.contains("depth 100000") && e.contains("linear"), "{e}");
    }
    assert_eq!(auto_choice(model.clone(), None, &options).unwrap().algorithm, Algorithm::Linear);
    let linear = build_engine(model.clone(), Algorithm::Auto, None, &options).unwrap();
    assert_eq!(linear.name(), "linear");
    let block = rows(&model, 16);
    let shap = linear.shap(&block).unwrap();
    let mut margin = [0.0];
    for r in 0..block.rows() {
        model.predict_row(block.row(r), &mut margin);
        let total: f64 = shap.row(r, 0).iter().sum();
        assert!((total - margin[0]).abs() <= 1e-9 * margin[0].abs().max(1.0), "row {r}: {total} vs {}", margin[0]);
    }
    linear.interactions(&block).unwrap();
}

#[test]
fn linear_refuses_a_walk_over_its_scratch_bound() {
    // 128 distinct features along 100,000 levels: 64 quadrature points at every level.
    let model = Arc::new(Model::from_bytes(&chain_model(100_000, 128), "wide_chain.json").unwrap());
    let e = build_engine(model, Algorithm::Linear, None, &EngineOptions::default()).err().expect("refused").to_string();
    assert!(e.contains("linear: tree 0") && e.contains("MiB of scratch per thread"), "{e}");
}

#[test]
fn every_engine_takes_a_tree_at_the_depth_limit() {
    // 100 distinct features: quadrature's widest rule, so its recursion has its largest frames.
    let model = Arc::new(Model::from_bytes(&chain_model(MAX_RECURSIVE_DEPTH, 100), "limit.json").unwrap());
    let block = rows(&model, 8);
    let options = EngineOptions::default();
    let reference = build_engine(model.clone(), Algorithm::Linear, None, &options).unwrap().shap(&block).unwrap();
    for algorithm in [Algorithm::TreeShap, Algorithm::FastV1, Algorithm::Quadrature] {
        let shap = build_engine(model.clone(), algorithm, None, &options).unwrap().shap(&block).unwrap();
        for (a, b) in shap.values.iter().zip(&reference.values) {
            assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{algorithm}: {a} vs {b}");
        }
    }
}

/// Every file `dir` holds, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn every_reader_survives_every_committed_input_and_fuzz_regression() {
    use shapfusion::model::ModelFormat;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut inputs = files_under(&root.join("tests/fixtures"));
    inputs.extend(files_under(&root.join("fuzz/regressions")));
    inputs.retain(|p| p.extension().is_some_and(|e| e != "parquet") && std::fs::metadata(p).unwrap().len() < 4 << 20);
    assert!(inputs.len() > 30, "too few inputs: {}", inputs.len());
    let mut loaded = 0;
    for path in &inputs {
        let bytes = std::fs::read(path).unwrap();
        for format in ModelFormat::ALL {
            match Model::from_bytes_as(&bytes, "replay", format) {
                Ok(model) => {
                    loaded += 1;
                    model.summary();
                }
                Err(e) => assert!(e.to_string().starts_with("replay"), "{}: error without the file name: {e}", path.display()),
            }
        }
    }
    // The fixture models themselves read in their own format.
    assert!(loaded >= 15, "only {loaded} inputs read as models");
}

/// XGBoost 1.x writes `size_leaf_vector: "0"` for scalar leaves (the fuzzer found the zero
/// dividing by zero when vector leaves were added): it reads as "1" does.
#[test]
fn a_leaf_vector_size_of_zero_or_one_means_scalar_leaves() {
    let with_size = |size: &str| {
        let mut model: serde_json::Value = serde_json::from_slice(&chain_model(3, 2)).unwrap();
        model["learner"]["gradient_booster"]["model"]["trees"][0]["tree_param"] = serde_json::json!({"size_leaf_vector": size});
        Model::from_bytes(&serde_json::to_vec(&model).unwrap(), "chain.json")
    };
    let (zero, one) = (with_size("0").unwrap(), with_size("1").unwrap());
    assert_eq!(zero, one);
    assert_eq!(zero.trees().len(), 1);
    let e = with_size("3").unwrap_err().to_string();
    assert!(e.contains("size_leaf_vector = 3") && e.contains("1 targets"), "{e}");
}

/// The scikit-learn trees file, CatBoost JSON and Spark ML directories refuse malformed input
/// with errors that name the file and what is wrong.
#[test]
fn new_formats_refuse_malformed_files_by_name() {
    let skl = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join("skl_gradient_boosting/model.json")).unwrap();
    let load = |text: &str| Model::from_bytes(text.as_bytes(), "edited.json").unwrap_err().to_string();
    let e = load(&skl.replacen("\"format_version\":1", "\"format_version\":2", 1));
    assert!(e.contains("edited.json") && e.contains("format_version 2") && e.contains("newer shapfusion"), "{e}");
    let e = load(&skl.replacen("\"num_outputs\":1", "\"num_outputs\":1,\"surprise\":true", 1));
    assert!(e.contains("surprise"), "{e}");
    let e = load(&skl.replacen("\"left\":[1,", "\"left\":[99999,", 1));
    assert!(e.contains("tree 0") && e.contains("99999"), "{e}");

    let cb = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join("cb_binary_missing/model.json")).unwrap();
    let e = load(&cb.replacen("\"FloatFeature\"", "\"OnlineCtr\"", 1));
    assert!(e.contains("CTR split at border") && e.contains("features_info.ctrs"), "{e}");
    let e = load(&cb.replacen("\"FloatFeature\"", "\"Estimator\"", 1));
    assert!(e.contains("\"Estimator\"") && e.contains("OnlineCtr are read"), "{e}");
    let e = load(&cb.replacen("\"leaf_weights\"", "\"leaf_weightz\"", 1));
    assert!(e.contains("leaf_weights"), "{e}");
    // Non-symmetric trees (Lossguide): a leaf without its weight, a split with one child, a CTR
    // split; and nesting deeper than the JSON parser takes is an error, not a deep recursion.
    let lossguide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join("cb_lossguide_binary/model.json")).unwrap();
    let e = load(&lossguide.replacen("\"weight\"", "\"heft\"", 1));
    assert!(e.contains("tree 0") && e.contains("a leaf has no weight"), "{e}");
    let e = load(&lossguide.replacen("\"right\"", "\"rite\"", 1));
    assert!(e.contains("tree 0") && e.contains("both left and right"), "{e}");
    let e = load(&lossguide.replacen("\"FloatFeature\"", "\"OnlineCtr\"", 1));
    assert!(e.contains("tree 0") && e.contains("CTR split at border"), "{e}");
    // CTR splits: a file without its CTR tables, a CTR type not built yet, a combination element
    // of a kind not built yet or of a feature the file does not list, and a table of the wrong
    // shape are refused by name; a model whose tables are whole loads, its CTRs made
    // combinations too.
    let ctr: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cb_ctr_regression/model.json")).unwrap(),
    )
    .unwrap();
    assert!(Model::from_bytes(&serde_json::to_vec(&ctr).unwrap(), "ctr.json").is_ok());
    let edited = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut model = ctr.clone();
        edit(&mut model);
        load(&model.to_string())
    };
    let e = edited(&|m| drop(m.as_object_mut().unwrap().remove("ctr_data")));
    assert!(e.contains("ctr_data has no table") && e.contains("Skip"), "{e}");
    let e = edited(&|m| m["features_info"]["ctrs"][0]["ctr_type"] = "FloatTargetMeanValue".into());
    assert!(e.contains("FloatTargetMeanValue") && e.contains("not built yet"), "{e}");
    let with_element = |element: serde_json::Value| {
        let mut model = ctr.clone();
        for c in model["features_info"]["ctrs"].as_array_mut().unwrap() {
            c["elements"].as_array_mut().unwrap().push(element.clone());
        }
        Model::from_bytes(model.to_string().as_bytes(), "edited.json")
    };
    let combined = with_element(serde_json::json!({"cat_feature_index": 0, "combination_element": "cat_feature_value"})).unwrap();
    assert!(combined.combinations().is_some_and(|c| !c.columns().is_empty()));
    let e = with_element(serde_json::json!({"text_feature_index": 0, "combination_element": "text_feature"})).unwrap_err().to_string();
    assert!(e.contains("edited.json") && e.contains("\"text_feature\"") && e.contains("not built yet"), "{e}");
    let e = with_element(serde_json::json!({"cat_feature_index": 9, "combination_element": "cat_feature_value"})).unwrap_err().to_string();
    assert!(e.contains("edited.json") && e.contains("categorical feature 9") && e.contains("does not list"), "{e}");
    let e = edited(&|m| {
        for table in m["ctr_data"].as_object_mut().unwrap().values_mut() {
            table["hash_map"].as_array_mut().unwrap().pop();
        }
    });
    assert!(e.contains("ctr_data table") && e.contains("multiple of hash_stride"), "{e}");
    let leaf = r#"{"value":0.5,"weight":1}"#;
    let split = r#"{"border":0.5,"float_feature_index":0,"split_index":0,"split_type":"FloatFeature"}"#;
    let mut deep = leaf.to_string();
    for _ in 0..200 {
        deep = format!(r#"{{"left":{deep},"right":{leaf},"split":{split}}}"#);
    }
    let start = lossguide.find("\"trees\"").unwrap();
    let e = load(&format!("{}\"trees\":[{deep}]}}", &lossguide[..start]));
    assert!(e.contains("edited.json") && e.contains("recursion limit"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let e = shapfusion::load_model(dir.path()).unwrap_err().to_string();
    assert!(e.contains("not a Spark ML model") && e.contains(&dir.path().display().to_string()), "{e}");
    // The core alone reads files, not directories, and says where a directory is read.
    let e = Model::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("shapfusion_files::load_model") && e.contains(&dir.path().display().to_string()), "{e}");
    // A Spark ML directory read from its files with a node pointing outside its tree.
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join("spark_tree_categorical/model");
    let mut files = Vec::new();
    for sub in ["metadata", "data"] {
        for entry in std::fs::read_dir(model.join(sub)).unwrap() {
            let entry = entry.unwrap();
            files.push((format!("{sub}/{}", entry.file_name().to_string_lossy()), bytes::Bytes::from(std::fs::read(entry.path()).unwrap())));
        }
    }
    assert!(shapfusion::spark::from_files(&files, "spark").is_ok());
    // Hadoop's side files, as Spark writes them next to the data, are not read as Parquet.
    let mut with_side_files = files.clone();
    for side in ["data/_SUCCESS", "data/._SUCCESS.crc", "data/.part-00000.snappy.parquet.crc", "metadata/.part-00000.crc"] {
        with_side_files.push((side.to_string(), bytes::Bytes::from_static(b"not parquet")));
    }
    let model = shapfusion::spark::from_files(&with_side_files, "spark");
    assert!(model.is_ok(), "{:?}", model.err());
    let metadata = files.iter_mut().find(|(f, _)| f.starts_with("metadata/")).unwrap();
    metadata.1 = bytes::Bytes::from(String::from_utf8(metadata.1.to_vec()).unwrap().replace("DecisionTreeRegressionModel", "LinearRegressionModel"));
    let e = shapfusion::spark::from_files(&files, "spark").unwrap_err().to_string();
    assert!(e.contains("LinearRegressionModel") && e.contains("not a tree model"), "{e}");
}

/// A Spark ML input the fuzzer found (`fuzz/regressions/spark_ml/`), read as
/// `fuzz/fuzz_targets/spark_ml.rs` reads it: a directory flattened as the metadata line, the
/// node data's length, the node data, the tree weights.
fn spark_ml_regression(data: &[u8]) -> shapfusion::error::Result<Model> {
    let meta_end = data.iter().position(|&b| b == b'\n').unwrap();
    let rest = &data[meta_end + 1..];
    let len_end = rest.iter().position(|&b| b == b'\n').unwrap();
    let len: usize = std::str::from_utf8(&rest[..len_end]).unwrap().trim().parse().unwrap();
    let (nodes, weights) = rest[len_end + 1..].split_at(len.min(rest.len() - len_end - 1));
    let files = vec![
        ("metadata/part-00000".to_string(), bytes::Bytes::copy_from_slice(&data[..meta_end])),
        ("data/part-00000.parquet".to_string(), bytes::Bytes::copy_from_slice(nodes)),
        ("treesMetadata/part-00000.parquet".to_string(), bytes::Bytes::copy_from_slice(weights)),
    ];
    shapfusion::spark::from_files(&files, "replay")
}

/// Spark ML inputs the fuzzer found are errors, never panics.
#[test]
fn spark_ml_fuzz_regressions_are_errors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/spark_ml");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let e = spark_ml_regression(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap_err().to_string();
        assert!(e.starts_with("replay"), "{e}");
        replayed += 1;
    }
    assert!(replayed >= 1);
}

/// A page header whose unknown field is a list of two billion 8-byte elements: the Parquet
/// crate skipped them one by one at the end of the file (9 s of CPU for this 160 KiB input,
/// a fuzzer's timeout); the reader's input fails a read past its end, so the header is refused
/// at the end of the file.
#[test]
fn a_page_header_read_past_the_end_of_a_spark_ml_file_is_refused_there() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/spark_ml/page_header_list_past_the_end");
    let e = spark_ml_regression(&std::fs::read(path).unwrap()).unwrap_err().to_string();
    assert!(e.starts_with("replay") && e.contains("read past the end of the Parquet file"), "{e}");
}

/// A page header that runs past the end of its column chunk into the next one, where an unknown
/// field holds a map of 442 million booleans (no byte each to the Parquet crate): the crate reads
/// a header on past its chunk, and skipped the map for 8 s (a fuzzer's timeout); the page
/// headers are walked as far as the crate reads them, and the map refused.
#[test]
fn a_page_header_past_its_column_chunk_is_walked_as_far_as_the_crate_reads_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/spark_ml/page_header_past_its_chunk");
    let e = spark_ml_regression(&std::fs::read(path).unwrap()).unwrap_err().to_string();
    assert!(e.starts_with("replay") && e.contains("row group 0, column 0, page header at byte 4: a map of 442277877 booleans in"), "{e}");
}

/// A footer whose unknown field is a map of 442 million booleans to booleans, which the Parquet
/// crate skips without reading a byte (seconds, a fuzzer's timeout): the footer is walked first
/// and the map refused, naming the file.
#[test]
fn a_map_of_millions_of_booleans_in_a_spark_ml_footer_is_refused() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/spark_ml/footer_map_of_booleans");
    let e = spark_ml_regression(&std::fs::read(path).unwrap()).unwrap_err().to_string();
    assert!(e.starts_with("replay") && e.contains("part-00000.parquet: footer: a map of 442277877 booleans in"), "{e}");
}
