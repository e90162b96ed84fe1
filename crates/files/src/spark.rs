//! Spark ML tree model reader: the directory `model.save(dir)` writes for `DecisionTree*`,
//! `RandomForest*` and `GBT*` models (Spark 3.x and 4.x).
//!
//! The directory holds `metadata/part-00000` (one JSON line: the model class, `numFeatures`,
//! `numClasses`, parameters), `data/` (Parquet, one row per node: `id`, `prediction`,
//! `impurityStats`, `leftChild`, `rightChild`, `split{featureIndex, leftCategoriesOrThreshold,
//! numCategories}`; ensembles wrap it as `{treeID, nodeData}`) and, for ensembles,
//! `treesMetadata/` (tree id, tree metadata, tree weight; Spark 3 names the columns `treeID,
//! metadata, weights`, Spark 4 `_1, _2, _3`, so they are read by position).
//!
//! What the trees compute is what shap's TreeExplainer explains for Spark models: a classifier's
//! trees give class probabilities (the normalised `impurityStats`), a random forest averages its
//! trees by their weights, a GBT model sums its regression trees times their weights (for a
//! classifier, the margin F of `rawPrediction = [-F, F]`). Covers are the weighted instance
//! counts from `impurityStats` (not `rawCount`, which ignores `weightCol`). A continuous split
//! sends `x <= threshold` left, so NaN goes right; a categorical split sends the listed
//! category values left and every other value right. Spark stores no feature names: features
//! are `f0, f1, …` in vector order.

use std::path::Path;

use shapfusion_core::error::{Error, Result};
use shapfusion_core::model::{ModelFormat, SPARK_METADATA_DIR};
use shapfusion_core::Model;

/// What this reader's errors call the format (the name every reader's errors use).
const FORMAT: &str = ModelFormat::SparkMl.name();

/// Most files a model directory may hold that are read.
const MAX_FILES: usize = 100_000;

/// Reads the model directory at `dir`.
pub fn from_dir(dir: &Path) -> Result<Model> {
    let name = dir.display().to_string();
    let mut files = Vec::new();
    for sub in ["metadata", "data", "treesMetadata"] {
        let path = dir.join(sub);
        if !path.is_dir() {
            continue;
        }
        let mut entries: Vec<_> =
            std::fs::read_dir(&path).map_err(|e| Error::io(&path, e))?.collect::<std::io::Result<_>>().map_err(|e| Error::io(&path, e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let file = entry.file_name().to_string_lossy().into_owned();
            if !is_data_file(&file) {
                continue;
            }
            if files.len() >= MAX_FILES {
                return Err(Error::ModelFormat { path: name, format: FORMAT, detail: format!("more than {MAX_FILES} files") });
            }
            let bytes = std::fs::read(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
            files.push((format!("{sub}/{file}"), bytes::Bytes::from(bytes)));
        }
    }
    if !files.iter().any(|(f, _)| is_metadata(f)) {
        return Err(Error::ModelFormat {
            path: name,
            format: "tree ensemble",
            detail: format!("a directory, but not a Spark ML model: it has no {SPARK_METADATA_DIR}/part-* file"),
        });
    }
    from_files(&files, &name)
}

/// Whether `file` (relative to the model directory) is its metadata JSON.
pub fn is_metadata(file: &str) -> bool {
    file.strip_prefix(SPARK_METADATA_DIR).and_then(|f| f.strip_prefix('/')).is_some_and(|f| f.starts_with("part-") && !f.contains('/'))
}

/// The last component of a `/`-separated path.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether a file of a model directory is read: not Hadoop's `_SUCCESS`/`.crc` side files.
pub fn is_data_file(file: &str) -> bool {
    !file.starts_with('_') && !file.starts_with('.') && !file.ends_with(".crc")
}

/// Reads a Spark ML model directory from its files, given as (path relative to the directory,
/// content) pairs: `metadata/part-*`, the Parquet parts under `data/` and, for ensembles,
/// `treesMetadata/`. Other files (`_SUCCESS`, `.crc`) are skipped. `name` is used in error
/// messages. The model is validated.
pub fn from_files(files: &[(String, bytes::Bytes)], name: &str) -> Result<Model> {
    Model::new(reader::from_files(files, name)?, name)
}

mod reader {
    use std::collections::BTreeMap;

    use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StructArray};
    use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type};
    use serde_json::Value;

    use super::*;
    use crate::decoder_guard;
    use shapfusion_core::model::{
        as_index, check_count, push_category_set, FeatureKind, ModelFormat, ModelParts, Node, Precision, SplitRule, Tree, LEAF, MAX_FEATURES,
        MAX_GROUPS,
    };

    /// Most nodes one tree may have (Spark's depth limit of 30 allows 2^31; this is far above
    /// what fits in memory usefully).
    const MAX_NODES: usize = 1 << 26;

    /// Most trees a model may have.
    const MAX_TREES: usize = 1 << 20;

    /// Largest category value a categorical split may list.
    const MAX_CATEGORY: usize = 1 << 24;

    /// What kind of model the metadata names.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Kind {
        DecisionTree,
        RandomForest,
        Gbt,
    }

    /// One node as Spark stores it.
    struct SparkNode {
        id: usize,
        prediction: f64,
        stats: Vec<f64>,
        left: i64,
        right: i64,
        feature: i64,
        split_values: Vec<f64>,
        categories: i64,
    }

    pub(super) fn from_files(files: &[(String, bytes::Bytes)], name: &str) -> Result<ModelParts> {
        let err = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail };
        let metadata = files
            .iter()
            .filter(|(f, _)| is_metadata(f))
            .min_by(|a, b| a.0.cmp(&b.0))
            .ok_or_else(|| err(format!("no {SPARK_METADATA_DIR}/part-* file: not a Spark ML model directory")))?;
        let line = metadata.1.split(|&b| b == b'\n').next().unwrap_or_default();
        let meta: Value = serde_json::from_slice(line).map_err(|e| err(format!("{}: {e}", metadata.0)))?;
        let class = meta.get("class").and_then(Value::as_str).ok_or_else(|| err(format!("{} has no \"class\"", metadata.0)))?;
        let short = class.rsplit('.').next().unwrap_or(class);
        let (kind, classifier) = match short {
            "DecisionTreeClassificationModel" => (Kind::DecisionTree, true),
            "DecisionTreeRegressionModel" => (Kind::DecisionTree, false),
            "RandomForestClassificationModel" => (Kind::RandomForest, true),
            "RandomForestRegressionModel" => (Kind::RandomForest, false),
            "GBTClassificationModel" => (Kind::Gbt, true),
            "GBTRegressionModel" => (Kind::Gbt, false),
            _ => {
                return Err(err(format!(
                    "model class {class} is not a tree model read here (DecisionTree, RandomForest and GBT classification and regression models are)"
                )))
            }
        };
        let count = |key: &str| -> Result<Option<usize>> {
            match meta.get(key) {
                None => Ok(None),
                Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| err(format!("{key} = {v} is not a count"))),
            }
        };
        let nf = count("numFeatures")?.ok_or_else(|| err(format!("{} has no numFeatures", metadata.0)))?;
        let nf = check_count(nf, MAX_FEATURES, "numFeatures").map_err(&err)?;
        // A classifier's trees carry class statistics; a GBT classifier's trees are regression
        // trees giving one margin.
        let classes = if classifier && kind != Kind::Gbt {
            let c = count("numClasses")?.ok_or_else(|| err(format!("{} has no numClasses", metadata.0)))?;
            check_count(c, MAX_GROUPS, "numClasses").map_err(&err)?.max(1)
        } else {
            1
        };
        let spark_version = meta.get("sparkVersion").and_then(Value::as_str).map(|v| format!("Spark {v}"));

        let mut trees_nodes: BTreeMap<i64, Vec<SparkNode>> = BTreeMap::new();
        for (file, bytes) in files.iter().filter(|(f, _)| f.starts_with("data/") && is_data_file(file_name(f))) {
            for batch in read_parquet(bytes, file, name)? {
                read_nodes(&batch, kind != Kind::DecisionTree, file, name, &mut trees_nodes)?;
            }
        }
        if trees_nodes.is_empty() {
            return Err(err("data/ holds no nodes".into()));
        }
        if trees_nodes.len() > MAX_TREES {
            return Err(err(format!("{} trees is more than shapfusion takes ({MAX_TREES})", trees_nodes.len())));
        }
        let weights = if kind == Kind::DecisionTree { BTreeMap::from([(0, 1.0)]) } else { tree_weights(files, name)? };
        let total_weight: f64 = weights.values().sum();

        let mut trees = Vec::with_capacity(trees_nodes.len() * classes);
        for (tree_id, nodes) in &trees_nodes {
            let weight = *weights.get(tree_id).ok_or_else(|| err(format!("tree {tree_id} has no weight in treesMetadata/")))?;
            // A forest averages its trees; a GBT model sums them with their weights.
            let weight = if kind == Kind::RandomForest { weight / total_weight } else { weight };
            for class in 0..classes {
                let tree = tree(nodes, *tree_id, class, classifier && kind != Kind::Gbt, nf, name)?;
                trees.push(Tree { weight, group: class, ..tree });
            }
        }
        let objective = match (kind, classifier) {
            (Kind::Gbt, true) => "GBT classification margin F (rawPrediction [-F, F], probability 1/(1+exp(-2F)))".to_string(),
            (_, true) => "class probabilities".to_string(),
            (_, false) => "regression".to_string(),
        };
        Ok(ModelParts {
            format: ModelFormat::SparkMl,
            library_version: spark_version.map(|v| format!("{v} ({short})")),
            objective,
            feature_names: (0..nf).map(|j| format!("f{j}")).collect(),
            feature_kinds: vec![FeatureKind::Numeric; nf],
            num_groups: classes,
            base_margin: vec![0.0; classes],
            trees,
            precision: Precision::F64,
            categories: vec![None; nf],
            combinations: None,
        })
    }

    fn read_parquet(bytes: &bytes::Bytes, file: &str, name: &str) -> Result<Vec<RecordBatch>> {
        let bad = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail: format!("{file}: {detail}") };
        let builder = decoder_guard::open(bytes.clone()).map_err(|e| bad(e.to_string()))?;
        let reader = builder.build().map_err(|e| bad(e.to_string()))?;
        decoder_guard::catch_decoder_panic(|| reader.collect::<std::result::Result<Vec<_>, _>>())
            .ok_or_else(|| bad(decoder_guard::corrupt("Parquet")))?
            .map_err(|e| bad(e.to_string()))
    }

    /// A column of a struct or batch by name, with a message naming the file when it is missing.
    fn column<'a>(columns: &'a StructArray, field: &str, file: &str, name: &str) -> Result<&'a ArrayRef> {
        columns.column_by_name(field).ok_or_else(|| Error::ModelFormat {
            path: name.into(),
            format: FORMAT,
            detail: format!("{file}: no column {field}"),
        })
    }

    /// Reads an integer column of either width as i64, refusing nulls.
    fn ints(array: &ArrayRef, field: &str, file: &str, name: &str) -> Result<Vec<i64>> {
        let bad = |what: &str| Error::ModelFormat { path: name.into(), format: FORMAT, detail: format!("{file}: column {field} {what}") };
        if array.null_count() > 0 {
            return Err(bad("has nulls"));
        }
        match array.data_type() {
            DataType::Int32 => Ok(array.as_primitive::<Int32Type>().values().iter().map(|&v| v as i64).collect()),
            DataType::Int64 => Ok(array.as_primitive::<Int64Type>().values().to_vec()),
            t => Err(bad(&format!("is {t}, not an integer"))),
        }
    }

    fn doubles(array: &ArrayRef, field: &str, file: &str, name: &str) -> Result<Vec<f64>> {
        let bad = |what: &str| Error::ModelFormat { path: name.into(), format: FORMAT, detail: format!("{file}: column {field} {what}") };
        if array.null_count() > 0 {
            return Err(bad("has nulls"));
        }
        match array.data_type() {
            DataType::Float64 => Ok(array.as_primitive::<Float64Type>().values().to_vec()),
            t => Err(bad(&format!("is {t}, not a double"))),
        }
    }

    /// A `list<double>` column as one vector per row.
    fn double_lists(array: &ArrayRef, field: &str, file: &str, name: &str) -> Result<Vec<Vec<f64>>> {
        let bad = |what: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail: format!("{file}: column {field} {what}") };
        let list = array.as_list_opt::<i32>().ok_or_else(|| bad(format!("is {}, not a list of doubles", array.data_type())))?;
        let values = list.values();
        let values = values.as_primitive_opt::<Float64Type>().ok_or_else(|| bad(format!("holds {}, not doubles", values.data_type())))?;
        Ok((0..list.len())
            .map(|i| {
                if list.is_null(i) {
                    Vec::new()
                } else {
                    values.values()[list.value_offsets()[i] as usize..list.value_offsets()[i + 1] as usize].to_vec()
                }
            })
            .collect())
    }

    fn read_nodes(batch: &RecordBatch, ensemble: bool, file: &str, name: &str, out: &mut BTreeMap<i64, Vec<SparkNode>>) -> Result<()> {
        let bad = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail: format!("{file}: {detail}") };
        let batch = StructArray::from(batch.clone());
        let (tree_ids, nodes) = if ensemble {
            let ids = ints(column(&batch, "treeID", file, name)?, "treeID", file, name)?;
            let data = column(&batch, "nodeData", file, name)?;
            let data = data.as_struct_opt().ok_or_else(|| bad("column nodeData is not a struct".into()))?.clone();
            (ids, data)
        } else {
            (vec![0; batch.len()], batch)
        };
        if nodes.null_count() > 0 {
            return Err(bad("a node row is null".into()));
        }
        let ids = ints(column(&nodes, "id", file, name)?, "id", file, name)?;
        let prediction = doubles(column(&nodes, "prediction", file, name)?, "prediction", file, name)?;
        let stats = double_lists(column(&nodes, "impurityStats", file, name)?, "impurityStats", file, name)?;
        let left = ints(column(&nodes, "leftChild", file, name)?, "leftChild", file, name)?;
        let right = ints(column(&nodes, "rightChild", file, name)?, "rightChild", file, name)?;
        let split = column(&nodes, "split", file, name)?;
        let split = split.as_struct_opt().ok_or_else(|| bad("column split is not a struct".into()))?;
        if split.null_count() > 0 {
            return Err(bad("a split is null".into()));
        }
        let feature = ints(column(split, "featureIndex", file, name)?, "split.featureIndex", file, name)?;
        let split_values = double_lists(column(split, "leftCategoriesOrThreshold", file, name)?, "split.leftCategoriesOrThreshold", file, name)?;
        let categories = ints(column(split, "numCategories", file, name)?, "split.numCategories", file, name)?;
        for (r, tree_id) in tree_ids.into_iter().enumerate() {
            let id = usize::try_from(ids[r]).ok().filter(|&i| i < MAX_NODES).ok_or_else(|| bad(format!("node id {} is out of range", ids[r])))?;
            out.entry(tree_id).or_default().push(SparkNode {
                id,
                prediction: prediction[r],
                stats: stats[r].clone(),
                left: left[r],
                right: right[r],
                feature: feature[r],
                split_values: split_values[r].clone(),
                categories: categories[r],
            });
        }
        Ok(())
    }

    /// Tree weights by tree id from `treesMetadata/` (columns by position: id, metadata, weight).
    fn tree_weights(files: &[(String, bytes::Bytes)], name: &str) -> Result<BTreeMap<i64, f64>> {
        let mut weights = BTreeMap::new();
        for (file, bytes) in files.iter().filter(|(f, _)| f.starts_with("treesMetadata/") && is_data_file(file_name(f))) {
            for batch in read_parquet(bytes, file, name)? {
                let bad = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail: format!("{file}: {detail}") };
                if batch.num_columns() < 3 {
                    return Err(bad(format!("{} columns; tree id, metadata and weight expected", batch.num_columns())));
                }
                let ids = ints(batch.column(0), "tree id (column 1)", file, name)?;
                let w = doubles(batch.column(2), "tree weight (column 3)", file, name)?;
                for (id, w) in ids.into_iter().zip(w) {
                    if !w.is_finite() {
                        return Err(bad(format!("tree {id} has weight {w}")));
                    }
                    weights.insert(id, w);
                }
            }
        }
        if weights.is_empty() {
            return Err(Error::ModelFormat {
                path: name.into(),
                format: FORMAT,
                detail: "an ensemble without treesMetadata/ (its tree weights)".into(),
            });
        }
        Ok(weights)
    }

    /// One tree for output `class`: Spark nodes are placed by id, children are ids.
    fn tree(spark: &[SparkNode], tree_id: i64, class: usize, class_probabilities: bool, nf: usize, name: &str) -> Result<Tree> {
        let t = usize::try_from(tree_id).unwrap_or(usize::MAX);
        let bad = |node: usize, detail: String| Error::InvalidTree { path: name.into(), tree: t, node, detail };
        let n = spark.len();
        let mut slot: Vec<Option<&SparkNode>> = vec![None; n];
        for node in spark {
            let s =
                slot.get_mut(node.id).ok_or_else(|| bad(node.id, format!("node id {} but the tree has {n} nodes: ids are not 0..{n}", node.id)))?;
            if s.replace(node).is_some() {
                return Err(bad(node.id, format!("node id {} appears twice", node.id)));
            }
        }
        let mut nodes = Vec::with_capacity(n);
        let mut category_words = Vec::new();
        for (i, s) in slot.into_iter().enumerate() {
            let s = s.ok_or_else(|| bad(i, "node id missing".into()))?;
            // Covers: the weighted instance count (sum of class counts, or a variance node's
            // count); leaves' values: class probabilities or the prediction.
            let cover = if class_probabilities { s.stats.iter().sum() } else { s.stats.first().copied().unwrap_or(f64::NAN) };
            let value = if class_probabilities {
                let total: f64 = s.stats.iter().sum();
                if s.stats.len() <= class {
                    return Err(bad(i, format!("impurityStats has {} classes, class {class} expected", s.stats.len())));
                }
                if total > 0.0 {
                    s.stats[class] / total
                } else {
                    0.0
                }
            } else {
                s.prediction
            };
            let mut node = Node::leaf(value, cover);
            if s.left >= 0 || s.right >= 0 {
                let child = |c: i64| {
                    as_index(c as f64, n).map(|c| c as u32).ok_or_else(|| bad(i, format!("child id {c} is out of range (tree has {n} nodes)")))
                };
                node.left = child(s.left)?;
                node.right = child(s.right)?;
                node.feature = as_index(s.feature as f64, nf)
                    .ok_or_else(|| bad(i, format!("splits on feature {} but the model has {nf} features", s.feature)))?
                    as u32;
                node.default_left = false;
                if s.categories < 0 {
                    let [threshold] = s.split_values[..] else {
                        return Err(bad(i, format!("a continuous split holds {} values, one threshold expected", s.split_values.len())));
                    };
                    node.rule = SplitRule::LgbLessEqual { threshold, missing: shapfusion_core::model::MissingType::NaN };
                } else {
                    let codes = s
                        .split_values
                        .iter()
                        .map(|&c| {
                            as_index(c, MAX_CATEGORY)
                                .map(|c| c as u32)
                                .ok_or_else(|| bad(i, format!("category {c} is not a category index below {MAX_CATEGORY}")))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    node.rule = SplitRule::CategoriesLeft { exact: true };
                    node.categories = push_category_set(&mut category_words, &codes).map_err(|d| bad(i, d))?;
                }
            } else {
                node.left = LEAF;
                node.right = LEAF;
            }
            nodes.push(node);
        }
        Ok(Tree { nodes, category_words, group: class, weight: 1.0 })
    }
}
