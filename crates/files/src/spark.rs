//! Spark ML tree model reader: the directory `model.save(dir)` writes for `DecisionTree*`,
//! `RandomForest*` and `GBT*` models (Spark 3.x and 4.x), alone or inside the models users
//! save around them: a `OneVsRestModel` of binary tree classifiers (how Spark trains a
//! multiclass GBT model), a `PipelineModel` (its one tree model stage, with feature names from
//! the `VectorAssembler` that builds the stage's features column) and the tuning models
//! `CrossValidatorModel` and `TrainValidationSplitModel` (their `bestModel`); and the directory
//! an `xgboost.spark` model saves (its booster's JSON under `model/`), alone or in those.
//!
//! The directory holds `metadata/part-00000` (one JSON line: the model class, `numFeatures`,
//! `numClasses`, parameters), `data/` (Parquet, one row per node: `id`, `prediction`,
//! `impurityStats`, `leftChild`, `rightChild`, `split{featureIndex, leftCategoriesOrThreshold,
//! numCategories}`; ensembles wrap it as `{treeID, nodeData}`) and, for ensembles,
//! `treesMetadata/` (tree id, tree metadata, tree weight; Spark 3 names the columns `treeID,
//! metadata, weights`, Spark 4 `_1, _2, _3`, so they are read by position). A pipeline's
//! metadata lists its stages' uids (`paramMap.stageUids`), each saved whole under
//! `stages/{index}_{uid}/`; a tuning model saves its best model whole under `bestModel/` (beside
//! its estimator, evaluator and, when kept, every sub-model, which are not read); a one-vs-rest
//! model saves class k's model under `model_{k}/` (beside its classifier's parameters).
//!
//! What the trees compute is what shap's TreeExplainer explains for Spark models: a classifier's
//! trees give class probabilities (the normalised `impurityStats`), a random forest averages its
//! trees by their weights, a GBT model sums its regression trees times their weights (for a
//! classifier, the margin F of `rawPrediction = [-F, F]`). A one-vs-rest model has an output a
//! class, what its `rawPrediction` holds: class k's model's `rawPrediction(1)` (a decision
//! tree's leaf count of class 1, a forest's sum of its trees' class-1 probabilities, a GBT
//! margin F), whose largest is the predicted class. Covers are the weighted instance
//! counts from `impurityStats` (not `rawCount`, which ignores `weightCol`). A continuous split
//! sends `x <= threshold` left, so NaN goes right; a categorical split sends the listed
//! category values left and every other value right. A tree model stores no feature names:
//! features are `f0, f1, …` in vector order, unless a pipeline's `VectorAssembler` made the
//! model's features column from as many columns as the model has features (then they are those
//! columns' names; an assembler with a vector among its inputs makes more features than names,
//! and the model keeps `f0, f1, …`).

use std::path::Path;

use shapfusion_core::error::{Error, Result};
use shapfusion_core::model::{ModelFormat, SPARK_METADATA_DIR};
use shapfusion_core::Model;

/// What this reader's errors call the format (the name every reader's errors use).
const FORMAT: &str = ModelFormat::SparkMl.name();

/// Most files a model directory may hold that are read.
const MAX_FILES: usize = 100_000;

/// Most pipelines and tuning models a tree model may sit inside, one in another (Spark sets no
/// limit; a directory is never walked deeper than this, whatever it holds).
const MAX_NESTING: usize = 8;

/// The directories of one saved model whose files are read: a tree model's metadata, node data
/// and tree weights, and an `xgboost.spark` model's booster (`model/`).
const MODEL_PART_DIRS: [&str; 4] = [SPARK_METADATA_DIR, "data", "treesMetadata", "model"];

/// Whether the directories `dirs` (relative to the model directory) can hold files the reader
/// reads: a model's part directory ([`MODEL_PART_DIRS`]) under at most [`MAX_NESTING`] pipeline
/// stages (`stages/{index}_{uid}`), tuned best models (`bestModel`) and a one-vs-rest model's
/// models (`model_{class}`). With `complete`, `dirs` must end at a part directory; without, it
/// may stop on the way to one (a directory to walk).
fn model_layout(dirs: &[&str], complete: bool) -> bool {
    let mut rest = dirs;
    for _ in 0..=MAX_NESTING {
        rest = match rest {
            [] | ["stages"] => return !complete,
            [part] if MODEL_PART_DIRS.contains(part) => return true,
            ["stages", _, tail @ ..] | ["bestModel", tail @ ..] => tail,
            [class_model, tail @ ..] if is_class_model_dir(class_model) => tail,
            _ => return false,
        };
    }
    false
}

/// Whether a directory's name is that of a one-vs-rest model's model of one class: `model_3`.
fn is_class_model_dir(dir: &str) -> bool {
    dir.strip_prefix("model_").is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `file` (a path relative to the model directory, `/`-separated) is one the reader
/// reads: metadata, node data or tree weights of the model or of a pipeline stage, tuned best
/// model or one-vs-rest model's model inside it; not Hadoop's side files (`_SUCCESS`, `.crc`), nor a tuning model's
/// estimator, evaluator or sub-models. Directory listings (local and object stores) keep only
/// these.
pub fn is_model_file(file: &str) -> bool {
    let mut dirs: Vec<&str> = file.split('/').collect();
    let name = dirs.pop().unwrap_or_default();
    is_data_file(name) && model_layout(&dirs, true)
}

/// Whether the directory `dir` (a path relative to the model directory, `/`-separated) may hold
/// files the reader reads ([`is_model_file`]): one a directory walk goes into.
pub fn is_model_dir(dir: &str) -> bool {
    let dirs: Vec<&str> = dir.split('/').collect();
    model_layout(&dirs, false)
}

/// Reads the model directory at `dir`.
pub fn from_dir(dir: &Path) -> Result<Model> {
    let name = dir.display().to_string();
    let files = model_files(dir)?;
    if !files.iter().any(|(f, _)| is_metadata(f)) {
        return Err(Error::ModelFormat {
            path: name,
            format: "tree ensemble",
            detail: format!("a directory, but not a Spark ML model: it has no {SPARK_METADATA_DIR}/part-* file"),
        });
    }
    from_files(&files, &name)
}

/// The files of the model directory `dir` that the reader reads ([`is_model_file`]), as (path
/// relative to `dir`, content) pairs in path order.
fn model_files(dir: &Path) -> Result<Vec<(String, bytes::Bytes)>> {
    let name = dir.display().to_string();
    let too_many = || Error::ModelFormat { path: name.clone(), format: FORMAT, detail: format!("more than {MAX_FILES} files") };
    let mut files = Vec::new();
    // Walked without recursion: the layout bounds the depth, whatever the directory holds.
    let mut pending = vec![(String::new(), dir.to_path_buf())];
    while let Some((relative, path)) = pending.pop() {
        let mut entries: Vec<_> =
            std::fs::read_dir(&path).map_err(|e| Error::io(&path, e))?.collect::<std::io::Result<_>>().map_err(|e| Error::io(&path, e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let entry_name = entry.file_name().to_string_lossy().into_owned();
            let entry_relative = if relative.is_empty() { entry_name } else { format!("{relative}/{entry_name}") };
            let entry_path = entry.path();
            if entry_path.is_dir() {
                if is_model_dir(&entry_relative) {
                    pending.push((entry_relative, entry_path));
                }
            } else if is_model_file(&entry_relative) {
                if files.len() >= MAX_FILES {
                    return Err(too_many());
                }
                let bytes = std::fs::read(&entry_path).map_err(|e| Error::io(&entry_path, e))?;
                files.push((entry_relative, bytes::Bytes::from(bytes)));
            }
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
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
/// `treesMetadata/` (for an `xgboost.spark` model, `model/`), or those of a pipeline's stages, a
/// tuning model's best model and a one-vs-rest model's models (see [`is_model_file`]). Other
/// files are skipped. `name` is used in error messages. The model is validated.
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
        let located = locate(files, name)?;
        let files = files_under(files, &located.prefix);
        // Errors in the tree model name its own directory.
        let model_dir = match located.prefix.as_str() {
            "" => name.to_string(),
            prefix => format!("{}/{}", name.trim_end_matches('/'), prefix.trim_end_matches('/')),
        };
        let mut parts = match located.meta.class.as_str() {
            "OneVsRestModel" => one_vs_rest(&files, &located.meta, &model_dir)?,
            class if is_xgboost_spark_class(class) => xgboost_spark(&files, &located.meta, &model_dir)?,
            _ => tree_model(&files, &located.meta, Scores::Model, &model_dir)?,
        };
        // Names from around the model replace only vector-order ones (a booster may name its
        // features itself).
        let unnamed = parts.feature_names.iter().enumerate().all(|(j, n)| *n == format!("f{j}"));
        if let (Some(names), true) = (located.feature_names, unnamed) {
            let unique = names.iter().collect::<std::collections::HashSet<_>>().len() == names.len();
            if names.len() == parts.feature_names.len() && unique {
                parts.feature_names = names;
            } else {
                tracing::warn!(
                    model = name,
                    "the model's feature columns name {} columns for {} features{}: features are named f0, f1, ... in vector order",
                    names.len(),
                    parts.feature_names.len(),
                    if unique { "" } else { " (some named twice)" },
                );
            }
        }
        Ok(parts)
    }

    /// The files under the directory `prefix` (with a trailing `/`, or empty for all), with
    /// paths relative to it: a model inside another read as if saved alone.
    fn files_under(files: &[(String, bytes::Bytes)], prefix: &str) -> Vec<(String, bytes::Bytes)> {
        files.iter().filter_map(|(f, b)| Some((f.strip_prefix(prefix)?.to_string(), b.clone()))).collect()
    }

    /// Where a directory's model is, and what a pipeline around it says of its features.
    struct Located {
        /// The model's directory, relative to the model directory, with a trailing `/` (empty
        /// for the directory itself).
        prefix: String,
        /// The model's metadata (its file's name and first line).
        meta: Metadata,
        /// What names the model's features from around it: the input columns of the
        /// `VectorAssembler` that makes its features column (when a pipeline has one before
        /// it), or an `xgboost.spark` model's `features_cols`.
        feature_names: Option<Vec<String>>,
    }

    /// A saved model's metadata: the first line of `metadata/part-*`.
    struct Metadata {
        file: String,
        json: Value,
        /// The class's last component (`GBTClassificationModel`).
        class: String,
    }

    impl Metadata {
        /// The metadata of the model saved in `prefix` (a directory with a trailing `/`, or
        /// empty), when `files` holds it.
        fn of(files: &[(String, bytes::Bytes)], prefix: &str, name: &str) -> Result<Option<Metadata>> {
            let err = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail };
            let Some((file, bytes)) = files.iter().filter(|(f, _)| f.strip_prefix(prefix).is_some_and(is_metadata)).min_by(|a, b| a.0.cmp(&b.0))
            else {
                return Ok(None);
            };
            let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
            let json: Value = serde_json::from_slice(line)
                .or_else(|e| serde_json::from_slice(&non_finite_as_null(line).ok_or(e)?))
                .map_err(|e| err(format!("{file}: {e}")))?;
            let class = json.get("class").and_then(Value::as_str).ok_or_else(|| err(format!("{file} has no \"class\"")))?;
            let class = class.rsplit('.').next().unwrap_or(class).to_string();
            Ok(Some(Metadata { file: file.clone(), json, class }))
        }

        /// A parameter as set (`paramMap`), else its default (`defaultParamMap`).
        fn param(&self, key: &str) -> Option<&Value> {
            ["paramMap", "defaultParamMap"].iter().find_map(|map| self.json.get(*map)?.get(key))
        }

        /// A string parameter, refusing another type.
        fn string_param(&self, key: &str, name: &str) -> Result<Option<&str>> {
            match self.param(key) {
                None => Ok(None),
                Some(v) => v.as_str().map(Some).ok_or_else(|| Error::ModelFormat {
                    path: name.into(),
                    format: FORMAT,
                    detail: format!("{}: {key} = {v} is not a string", self.file),
                }),
            }
        }

        /// A list-of-strings parameter, refusing another type.
        fn strings_param(&self, key: &str, name: &str) -> Result<Option<Vec<String>>> {
            let bad = |v: &Value| Error::ModelFormat {
                path: name.into(),
                format: FORMAT,
                detail: format!("{}: {key} = {v} is not a list of strings", self.file),
            };
            match self.param(key) {
                None => Ok(None),
                Some(v) => {
                    let list = v.as_array().ok_or_else(|| bad(v))?;
                    list.iter().map(|s| s.as_str().map(str::to_string).ok_or_else(|| bad(v))).collect::<Result<Vec<_>>>().map(Some)
                }
            }
        }
    }

    /// `line` with the non-finite numbers Python's `json` writes (`NaN`, `Infinity`,
    /// `-Infinity`, which JSON lacks) as `null`, when it has any outside strings: xgboost.spark
    /// saves its `missing` parameter so (`"missing":NaN`), and Spark and xgboost read it back.
    pub(super) fn non_finite_as_null(line: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(line.len());
        let (mut in_string, mut escaped, mut replaced) = (false, false, false);
        let mut i = 0;
        while i < line.len() {
            let b = line[i];
            if in_string {
                (escaped, in_string) = (!escaped && b == b'\\', escaped || b != b'"');
            } else if b == b'"' {
                in_string = true;
            } else if let Some(token) = [&b"NaN"[..], b"Infinity", b"-Infinity"].into_iter().find(|t| line[i..].starts_with(t)) {
                out.extend_from_slice(b"null");
                (i, replaced) = (i + token.len(), true);
                continue;
            }
            out.push(b);
            i += 1;
        }
        replaced.then_some(out)
    }

    /// Whether a model class is read here: as trees ([`tree_model`]), as a one-vs-rest model of
    /// them ([`one_vs_rest`]), as an `xgboost.spark` booster ([`xgboost_spark`]) or as a model
    /// holding one ([`locate`]).
    fn is_model_class(class: &str) -> bool {
        tree_kind(class).is_some()
            || is_xgboost_spark_class(class)
            || matches!(class, "OneVsRestModel" | "PipelineModel" | "CrossValidatorModel" | "TrainValidationSplitModel")
    }

    /// Whether a model class is one of `xgboost.spark`'s (`xgboost.spark.estimator.*`).
    fn is_xgboost_spark_class(class: &str) -> bool {
        matches!(class, "SparkXGBClassifierModel" | "SparkXGBRegressorModel" | "SparkXGBRankerModel")
    }

    /// Reads an `xgboost.spark` model (files relative to its directory): the booster's JSON,
    /// which it saves as one text file under `model/`, read as any XGBoost JSON model is.
    fn xgboost_spark(files: &[(String, bytes::Bytes)], metadata: &Metadata, name: &str) -> Result<ModelParts> {
        // A value other than NaN read as missing (`missing=0.0`) is the model's transform's, not
        // its booster's: shapfusion reads NaN and nulls as missing, as everywhere.
        if let Some(missing) = metadata.param("missing").and_then(Value::as_f64) {
            tracing::warn!(
                model = name,
                "the xgboost.spark model reads {missing} as missing; shapfusion reads {missing} as a number (only NaN and nulls are missing): give those values as nulls"
            );
        }
        let boosters: Vec<&(String, bytes::Bytes)> =
            files.iter().filter(|(f, _)| f.strip_prefix("model/").is_some_and(|file| !file.contains('/') && is_data_file(file))).collect();
        let [(file, bytes)] = boosters[..] else {
            return Err(Error::ModelFormat {
                path: name.into(),
                format: FORMAT,
                detail: format!("an xgboost.spark model with {} files under model/; one, the booster's JSON, expected", boosters.len()),
            });
        };
        Ok(Model::from_bytes_as(bytes, &format!("{}/{file}", name.trim_end_matches('/')), ModelFormat::XgboostJson)?.into_parts())
    }

    /// Finds the tree model in `files`: the directory's own, or the one a pipeline's stages or a
    /// tuning model's best model hold, at most [`MAX_NESTING`] deep (walked in a loop, not by
    /// recursion).
    fn locate(files: &[(String, bytes::Bytes)], name: &str) -> Result<Located> {
        let err = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail };
        let mut prefix = String::new();
        // Assemblers' output column -> input columns, in the order their stages run.
        let mut assembled: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
        for _ in 0..=MAX_NESTING {
            let meta = Metadata::of(files, &prefix, name)?
                .ok_or_else(|| err(format!("no {prefix}{SPARK_METADATA_DIR}/part-* file: not a Spark ML model directory")))?;
            match meta.class.as_str() {
                "PipelineModel" => prefix = pipeline_model_stage(files, &prefix, &meta, &mut assembled, name)?,
                "CrossValidatorModel" | "TrainValidationSplitModel" => {
                    let best = format!("{prefix}bestModel/");
                    if Metadata::of(files, &best, name)?.is_none() {
                        return Err(err(format!("a {} without {best}{SPARK_METADATA_DIR}/part-* (its best model)", meta.class)));
                    }
                    prefix = best;
                }
                _ => {
                    let features_column = meta.string_param("featuresCol", name)?.unwrap_or("features").to_string();
                    let mut feature_names = assembled.remove(&features_column);
                    // An xgboost.spark model trained on columns (`features_cols`) names them.
                    if is_xgboost_spark_class(&meta.class) {
                        if let Some(columns) = meta.strings_param("features_cols", name)?.filter(|c| !c.is_empty()) {
                            feature_names = Some(columns);
                        }
                    }
                    return Ok(Located { prefix, meta, feature_names });
                }
            }
        }
        Err(err(format!("pipelines and tuning models nested more than {MAX_NESTING} deep")))
    }

    /// The directory (with a trailing `/`) of the one stage of the `PipelineModel` saved in
    /// `prefix` that is a tree model or holds one, recording the `VectorAssembler`s before it
    /// in `assembled`.
    fn pipeline_model_stage(
        files: &[(String, bytes::Bytes)],
        prefix: &str,
        meta: &Metadata,
        assembled: &mut std::collections::HashMap<String, Vec<String>>,
        name: &str,
    ) -> Result<String> {
        let err = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail };
        let uids = meta.strings_param("stageUids", name)?.ok_or_else(|| err(format!("{}: a PipelineModel without stageUids", meta.file)))?;
        // Spark saves stage i as `stages/{i, zero-padded}_{uid}`: found by uid.
        let stages_dir = format!("{prefix}stages/");
        let mut stage_dirs: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
        for (file, _) in files {
            let Some(stage) = file.strip_prefix(&stages_dir).and_then(|f| f.split('/').next()) else { continue };
            if let Some((index, uid)) = stage.split_once('_') {
                if index.bytes().all(|b| b.is_ascii_digit()) {
                    stage_dirs.insert(uid, stage);
                }
            }
        }
        let mut models = Vec::new();
        let mut stages = Vec::with_capacity(uids.len());
        for (i, uid) in uids.iter().enumerate() {
            let dir = stage_dirs.get(uid.as_str()).map(|stage| format!("{stages_dir}{stage}/"));
            let stage = match &dir {
                Some(dir) => Metadata::of(files, dir, name)?,
                None => None,
            };
            let stage = stage
                .ok_or_else(|| err(format!("stage {i} ({uid}) of the PipelineModel has no {stages_dir}*_{uid}/{SPARK_METADATA_DIR}/part-* file")))?;
            if is_model_class(&stage.class) {
                models.push((i, dir.unwrap_or_default(), stage.class.clone()));
            } else if stage.class == "VectorAssembler" && models.is_empty() {
                if let (Some(output), Some(inputs)) = (stage.string_param("outputCol", name)?, stage.strings_param("inputCols", name)?) {
                    assembled.insert(output.to_string(), inputs);
                }
            }
            stages.push(format!("{i}: {}", stage.class));
        }
        match models.len() {
            1 => Ok(models.remove(0).1),
            0 => Err(err(format!(
                "a PipelineModel with no tree model stage read here (DecisionTree, RandomForest and GBT models are); its stages: {}",
                stages.join(", ")
            ))),
            _ => Err(err(format!(
                "a PipelineModel with {} model stages ({}): save the one to explain by itself (`model.stages[i].save(dir)`)",
                models.len(),
                models.iter().map(|(i, _, class)| format!("{i}: {class}")).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// What kind of tree model a class is, and whether it is a classifier.
    fn tree_kind(class: &str) -> Option<(Kind, bool)> {
        Some(match class {
            "DecisionTreeClassificationModel" => (Kind::DecisionTree, true),
            "DecisionTreeRegressionModel" => (Kind::DecisionTree, false),
            "RandomForestClassificationModel" => (Kind::RandomForest, true),
            "RandomForestRegressionModel" => (Kind::RandomForest, false),
            "GBTClassificationModel" => (Kind::Gbt, true),
            "GBTRegressionModel" => (Kind::Gbt, false),
            _ => return None,
        })
    }

    /// Which of a tree model's outputs are read.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Scores {
        /// What the model predicts: class probabilities, a GBT classifier's margin F, a
        /// regression.
        Model,
        /// A binary classifier's `rawPrediction(1)`, the score a `OneVsRestModel` takes of each
        /// of its models: a decision tree's leaf count of class 1, the sum of a forest's trees'
        /// class-1 probabilities times their weights (not their average), a GBT margin F.
        RawPositive,
    }

    /// What a leaf of a Spark tree is read as.
    #[derive(Debug, Clone, Copy)]
    enum LeafValue {
        /// The node's `prediction` (regression trees, a GBT model's trees).
        Prediction,
        /// A class's share of the node's `impurityStats`.
        Probability(usize),
        /// A class's weighted count in the node's `impurityStats` (a decision tree's
        /// `rawPrediction`).
        Count(usize),
    }

    /// A metadata field that is a count, if present.
    fn metadata_count(metadata: &Metadata, key: &str, name: &str) -> Result<Option<usize>> {
        match metadata.json.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| Error::ModelFormat {
                path: name.into(),
                format: FORMAT,
                detail: format!("{}: {key} = {v} is not a count", metadata.file),
            }),
        }
    }

    /// Reads a `OneVsRestModel` (files relative to its directory): one output a class, the
    /// score its model `model_{class}/` gives ([`Scores::RawPositive`]), as the model's own
    /// `rawPrediction` holds them (it predicts the class of the largest).
    fn one_vs_rest(files: &[(String, bytes::Bytes)], metadata: &Metadata, name: &str) -> Result<ModelParts> {
        let err = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail };
        let classes = metadata_count(metadata, "numClasses", name)?.ok_or_else(|| err(format!("{} has no numClasses", metadata.file)))?;
        let classes = check_count(classes, MAX_GROUPS, "numClasses").map_err(&err)?;
        let mut trees = Vec::new();
        let mut first: Option<ModelParts> = None;
        for class in 0..classes {
            let prefix = format!("model_{class}/");
            let class_files = files_under(files, &prefix);
            let class_meta = Metadata::of(&class_files, "", name)?
                .ok_or_else(|| err(format!("a OneVsRestModel of {classes} classes without {prefix}{SPARK_METADATA_DIR}/part-*")))?;
            let class_name = format!("{}/model_{class}", name.trim_end_matches('/'));
            let mut parts = tree_model(&class_files, &class_meta, Scores::RawPositive, &class_name)?;
            if let Some(first) = &first {
                if parts.feature_names.len() != first.feature_names.len() {
                    return Err(err(format!("model_{class} has {} features, model_0 {}", parts.feature_names.len(), first.feature_names.len())));
                }
            }
            trees.extend(parts.trees.drain(..).map(|t| Tree { group: class, ..t }));
            first.get_or_insert(parts);
        }
        let first = first.ok_or_else(|| err("a OneVsRestModel of no classes".into()))?;
        let version = metadata.json.get("sparkVersion").and_then(Value::as_str);
        Ok(ModelParts {
            library_version: version.map(|v| format!("Spark {v} (OneVsRestModel)")),
            objective: "one-vs-rest scores: each class's model's rawPrediction(1), the OneVsRestModel's rawPrediction".into(),
            num_groups: classes,
            base_margin: vec![0.0; classes],
            trees,
            ..first
        })
    }

    /// Reads the tree model whose files are `files` (paths relative to its own directory) and
    /// whose metadata is `metadata`, with the outputs `scores` says.
    fn tree_model(files: &[(String, bytes::Bytes)], metadata: &Metadata, scores: Scores, name: &str) -> Result<ModelParts> {
        let err = |detail: String| Error::ModelFormat { path: name.into(), format: FORMAT, detail };
        let meta = &metadata.json;
        let short = metadata.class.as_str();
        let (kind, classifier) = tree_kind(short).ok_or_else(|| {
            let class = meta.get("class").and_then(Value::as_str).unwrap_or(short);
            err(format!(
                "model class {class} is not a tree model read here (DecisionTree, RandomForest and GBT classification and regression models and xgboost.spark models are, alone, in a PipelineModel or as a CrossValidatorModel's or TrainValidationSplitModel's best model, and tree classifiers in a OneVsRestModel)"
            ))
        })?;
        let count = |key: &str| metadata_count(metadata, key, name);
        let nf = count("numFeatures")?.ok_or_else(|| err(format!("{} has no numFeatures", metadata.file)))?;
        let nf = check_count(nf, MAX_FEATURES, "numFeatures").map_err(&err)?;
        // A classifier's trees carry class statistics; a GBT classifier's trees are regression
        // trees giving one margin.
        let classes = if classifier && kind != Kind::Gbt {
            let c = count("numClasses")?.ok_or_else(|| err(format!("{} has no numClasses", metadata.file)))?;
            check_count(c, MAX_GROUPS, "numClasses").map_err(&err)?.max(1)
        } else {
            1
        };
        // Each output: its group and what its trees' leaves are read as.
        let binary = !classifier || kind == Kind::Gbt || classes == 2;
        if scores == Scores::RawPositive && !(classifier && binary) {
            return Err(err(format!(
                "a OneVsRestModel's models are binary classifiers; this is a {short}{}",
                if classifier { format!(" of {classes} classes") } else { String::new() }
            )));
        }
        let outputs: Vec<LeafValue> = match (scores, kind, classifier) {
            (_, Kind::Gbt, _) | (_, _, false) => vec![LeafValue::Prediction],
            (Scores::Model, _, true) => (0..classes).map(LeafValue::Probability).collect(),
            (Scores::RawPositive, Kind::DecisionTree, true) => vec![LeafValue::Count(1)],
            (Scores::RawPositive, _, true) => vec![LeafValue::Probability(1)],
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

        let mut trees = Vec::with_capacity(trees_nodes.len() * outputs.len());
        for (tree_id, nodes) in &trees_nodes {
            let weight = *weights.get(tree_id).ok_or_else(|| err(format!("tree {tree_id} has no weight in treesMetadata/")))?;
            // A forest's prediction averages its trees (its rawPrediction sums them); a GBT
            // model sums them with their weights.
            let weight = if kind == Kind::RandomForest && scores == Scores::Model { weight / total_weight } else { weight };
            for (group, &leaf) in outputs.iter().enumerate() {
                let tree = tree(nodes, *tree_id, leaf, nf, name)?;
                trees.push(Tree { weight, group, ..tree });
            }
        }
        let objective = match (kind, classifier, scores) {
            (Kind::Gbt, true, _) => "GBT classification margin F (rawPrediction [-F, F], probability 1/(1+exp(-2F)))".to_string(),
            (_, true, Scores::RawPositive) => "rawPrediction(1)".to_string(),
            (_, true, Scores::Model) => "class probabilities".to_string(),
            (_, false, _) => "regression".to_string(),
        };
        let classes = outputs.len();
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

    /// One tree, its leaves read as `leaf`: Spark nodes are placed by id, children are ids.
    fn tree(spark: &[SparkNode], tree_id: i64, leaf: LeafValue, nf: usize, name: &str) -> Result<Tree> {
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
            // count); leaves' values: the prediction, or a class's probability or count.
            let class_count = |class: usize| {
                s.stats.get(class).copied().ok_or_else(|| bad(i, format!("impurityStats has {} classes, class {class} expected", s.stats.len())))
            };
            let total: f64 = s.stats.iter().sum();
            let (cover, value) = match leaf {
                LeafValue::Prediction => (s.stats.first().copied().unwrap_or(f64::NAN), s.prediction),
                LeafValue::Probability(class) => {
                    let count = class_count(class)?;
                    (total, if total > 0.0 { count / total } else { 0.0 })
                }
                LeafValue::Count(class) => (total, class_count(class)?),
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
        Ok(Tree { nodes, category_words, group: 0, weight: 1.0, linear_leaves: vec![] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed fixture's model directory, read as the reader reads it.
    fn fixture_files(fixture: &str) -> Vec<(String, bytes::Bytes)> {
        model_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(fixture).join("model")).unwrap()
    }

    /// `files` with the metadata of the model (`start` empty) or of the stage whose directory
    /// starts with `start` edited by `edit`.
    fn edit_metadata(files: &mut [(String, bytes::Bytes)], start: &str, edit: impl Fn(&mut serde_json::Value)) {
        let (_, bytes) = files
            .iter_mut()
            .find(|(f, _)| match f.strip_prefix(start) {
                Some(rest) if start.is_empty() => is_metadata(rest),
                Some(rest) => rest.split_once('/').is_some_and(|(_, file)| is_metadata(file)),
                None => false,
            })
            .unwrap();
        let text = reader::non_finite_as_null(bytes).unwrap_or_else(|| bytes.to_vec());
        let mut json: serde_json::Value = serde_json::from_slice(&text).unwrap();
        edit(&mut json);
        *bytes = bytes::Bytes::from(json.to_string());
    }

    #[test]
    fn the_layout_reads_models_stages_and_best_models_only() {
        for read in [
            "metadata/part-00000",
            "data/part-00000.snappy.parquet",
            "stages/2_GBTClassifier_e9a1/treesMetadata/part-00000.parquet",
            "bestModel/stages/1_RandomForestClassifier_1d67/data/part-00000.parquet",
            "bestModel/bestModel/metadata/part-00000",
        ] {
            assert!(is_model_file(read), "{read}");
        }
        for skipped in [
            "data/_SUCCESS",
            "data/.part-00000.parquet.crc",
            "estimator/metadata/part-00000",
            "evaluator/metadata/part-00000",
            "subModels/fold0/0/metadata/part-00000",
            "stages/metadata/part-00000",
            "notes/data/part-00000",
            "part-00000",
        ] {
            assert!(!is_model_file(skipped), "{skipped}");
        }
        assert!(is_model_dir("stages") && is_model_dir("stages/0_VectorAssembler_ab") && is_model_dir("bestModel/stages"));
        assert!(!is_model_dir("subModels") && !is_model_dir("estimator/stages"));
        let nested = |levels: usize| format!("{}metadata/part-00000", "bestModel/".repeat(levels));
        assert!(is_model_file(&nested(MAX_NESTING)) && !is_model_file(&nested(MAX_NESTING + 1)));
    }

    #[test]
    fn a_pipeline_names_its_features_by_the_assembler_before_its_tree_stage() {
        let pipeline = from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/spark_pipeline_gbt/model")).unwrap();
        assert_eq!(pipeline.feature_names(), ["amount", "age", "score", "city_index"]);
        let tuned = from_files(&fixture_files("spark_cv_forest"), "cv").unwrap();
        assert_eq!(tuned.feature_names(), ["income", "tenure", "balance", "utilisation", "inquiries"]);

        // An assembler of fewer columns than the model has features (a vector among its inputs),
        // or of another column than the model's features column: vector-order names.
        let files = fixture_files("spark_pipeline_gbt");
        let mut fewer = files.clone();
        edit_metadata(&mut fewer, "stages/1_VectorAssembler", |m| m["paramMap"]["inputCols"] = serde_json::json!(["amount", "city_vector"]));
        assert_eq!(from_files(&fewer, "p").unwrap().feature_names(), ["f0", "f1", "f2", "f3"]);
        let mut elsewhere = files.clone();
        edit_metadata(&mut elsewhere, "stages/2_GBTClassifier", |m| m["paramMap"]["featuresCol"] = serde_json::json!("other"));
        assert_eq!(from_files(&elsewhere, "p").unwrap().feature_names(), ["f0", "f1", "f2", "f3"]);
    }

    #[test]
    fn pipelines_without_one_tree_stage_are_refused_naming_their_stages() {
        let files = fixture_files("spark_pipeline_gbt");
        let uids = |m: &serde_json::Value| m["paramMap"]["stageUids"].as_array().unwrap().clone();
        let gbt_uid = |files: &[(String, bytes::Bytes)]| {
            let meta = files.iter().find(|(f, _)| is_metadata(f)).unwrap();
            uids(&serde_json::from_slice(&meta.1).unwrap())[2].as_str().unwrap().to_string()
        };
        let uid = gbt_uid(&files);

        let mut no_model = files.clone();
        edit_metadata(&mut no_model, "", |m| {
            let kept: Vec<_> = uids(m).into_iter().take(2).collect();
            m["paramMap"]["stageUids"] = serde_json::json!(kept);
        });
        let e = from_files(&no_model, "p").unwrap_err().to_string();
        assert!(e.contains("no tree model stage") && e.contains("0: StringIndexerModel, 1: VectorAssembler"), "{e}");

        // The same tree stage listed twice: two model stages.
        let mut two = files.clone();
        edit_metadata(&mut two, "", |m| {
            let mut listed = uids(m);
            listed.push(listed[2].clone());
            m["paramMap"]["stageUids"] = serde_json::json!(listed);
        });
        let e = from_files(&two, "p").unwrap_err().to_string();
        assert!(e.contains("2 model stages") && e.contains("2: GBTClassificationModel, 3: GBTClassificationModel"), "{e}");

        let missing: Vec<_> = files.iter().filter(|(f, _)| !f.contains(&uid)).cloned().collect();
        let e = from_files(&missing, "p").unwrap_err().to_string();
        assert!(e.contains(&format!("stage 2 ({uid})")) && e.contains("no stages/*_"), "{e}");

        // A tree stage's own errors name its directory.
        let mut broken = files.clone();
        edit_metadata(&mut broken, "stages/2_GBTClassifier", |m| m["numFeatures"] = serde_json::json!("four"));
        let e = from_files(&broken, "/models/p").unwrap_err().to_string();
        assert!(e.contains(&format!("/models/p/stages/2_{uid}")) && e.contains("numFeatures"), "{e}");
    }

    #[test]
    fn a_one_vs_rest_model_has_an_output_a_class_from_binary_classifiers_only() {
        let files = fixture_files("spark_one_vs_rest_gbt");
        let model = from_files(&files, "ovr").unwrap();
        assert_eq!((model.num_groups(), model.feature_names().len()), (3, 4));
        assert!(is_model_file("model_2/treesMetadata/part-00000.parquet") && !is_model_file("classifier/metadata/part-00000"));

        let without_last: Vec<_> = files.iter().filter(|(f, _)| !f.starts_with("model_2/")).cloned().collect();
        let e = from_files(&without_last, "ovr").unwrap_err().to_string();
        assert!(e.contains("a OneVsRestModel of 3 classes without model_2/metadata/part-*"), "{e}");

        // A class's model read as a multiclass forest, or as a regressor: refused, naming it.
        let mut multiclass = fixture_files("spark_one_vs_rest_forest");
        edit_metadata(&mut multiclass, "model_1", |m| m["numClasses"] = serde_json::json!(3));
        let e = from_files(&multiclass, "/m/ovr").unwrap_err().to_string();
        assert!(e.contains("/m/ovr/model_1") && e.contains("binary classifiers; this is a RandomForestClassificationModel of 3 classes"), "{e}");
        let mut regressor = files.clone();
        edit_metadata(&mut regressor, "model_0", |m| m["class"] = serde_json::json!("org.apache.spark.ml.regression.GBTRegressionModel"));
        let e = from_files(&regressor, "ovr").unwrap_err().to_string();
        assert!(e.contains("binary classifiers; this is a GBTRegressionModel"), "{e}");
    }

    #[test]
    fn an_xgboost_spark_stage_is_its_booster_named_by_the_assembler() {
        let files = fixture_files("spark_xgboost_pipeline");
        assert!(files.iter().any(|(f, _)| f.starts_with("stages/1_SparkXGBClassifier") && f.contains("/model/part-")));
        let model = from_files(&files, "xgb").unwrap();
        assert_eq!(model.feature_names(), ["amount", "age", "score", "tenure"]);
        assert_eq!(model.format(), ModelFormat::XgboostJson);

        // Trained on columns (features_cols) without an assembler: those columns name the features.
        let mut by_columns: Vec<_> = files.iter().filter(|(f, _)| !f.starts_with("stages/0_VectorAssembler")).cloned().collect();
        edit_metadata(&mut by_columns, "", |m| {
            let uids = m["paramMap"]["stageUids"].as_array().unwrap()[1..].to_vec();
            m["paramMap"]["stageUids"] = serde_json::json!(uids);
        });
        edit_metadata(&mut by_columns, "stages/1_SparkXGB", |m| m["paramMap"]["features_cols"] = serde_json::json!(["a", "b", "c", "d"]));
        assert_eq!(from_files(&by_columns, "xgb").unwrap().feature_names(), ["a", "b", "c", "d"]);

        // Its metadata holds `"missing":NaN`, as Python's json writes it: read as null, in
        // strings left alone.
        let line = br#"{"s":"NaN \" Infinity","missing":NaN,"v":[-Infinity,Infinity]}"#;
        let read = reader::non_finite_as_null(line).unwrap();
        assert_eq!(std::str::from_utf8(&read).unwrap(), r#"{"s":"NaN \" Infinity","missing":null,"v":[null,null]}"#);
        assert!(reader::non_finite_as_null(br#"{"s":"NaN"}"#).is_none());

        let mut two = files.clone();
        let booster = two.iter().find(|(f, _)| f.contains("/model/part-")).unwrap().clone();
        two.push((booster.0.replace("part-", "part-1"), booster.1));
        let e = from_files(&two, "xgb").unwrap_err().to_string();
        assert!(e.contains("2 files under model/"), "{e}");
    }

    #[test]
    fn tuning_models_nest_a_bounded_depth() {
        let meta = |class: &str| bytes::Bytes::from(format!(r#"{{"class":"org.apache.spark.ml.tuning.{class}","paramMap":{{}}}}"#));
        let e = from_files(&[("metadata/part-00000".into(), meta("CrossValidatorModel"))], "cv").unwrap_err().to_string();
        assert!(e.contains("without bestModel/metadata/part-*"), "{e}");
        let deep: Vec<_> = (0..=MAX_NESTING + 1)
            .map(|level| (format!("{}metadata/part-00000", "bestModel/".repeat(level)), meta("TrainValidationSplitModel")))
            .collect();
        let e = from_files(&deep, "tvs").unwrap_err().to_string();
        assert!(e.contains(&format!("nested more than {MAX_NESTING} deep")), "{e}");
    }
}
