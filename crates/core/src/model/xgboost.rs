//! XGBoost model reader: the JSON schema of `Booster.save_model` (XGBoost 1.x–3.x), from JSON
//! or UBJSON bytes.
//!
//! What is honoured: `gbtree` and `dart` boosters (DART `weight_drop` becomes the tree weight),
//! `tree_info` output groups (multiclass, `num_parallel_tree` forests, one tree per target),
//! `base_score` in the objective's user space transformed to a margin the way the objective's
//! `ProbToMargin` does, `default_left`, categorical splits (`categories*` arrays), and
//! `feature_names` / `feature_types`, and the training categories of models trained on
//! categorical data (`cats`, XGBoost 3.1+). Vector-leaf trees (`multi_strategy="multi_output_tree"`)
//! become one tree per target. Not supported, with a clear error: `gblinear`.

use serde_json::Value;

use super::{
    as_index, check_count, Categories, FeatureKind, ModelFile, ModelFormat, ModelParts, Node, Precision, SplitRule, Tree, LEAF, MAX_CATEGORY_WORDS,
    MAX_FEATURES, MAX_GROUPS,
};
use crate::error::{Error, Result};

pub(super) fn from_json_bytes(bytes: &[u8], name: &str) -> Result<ModelParts> {
    let file = ModelFile::new(name, ModelFormat::XgboostJson);
    let value: Value = serde_json::from_slice(&quote_non_finite(bytes)).map_err(|e| file.json_error(e))?;
    Reader { file }.model(&value)
}

pub(super) fn from_ubjson_bytes(bytes: &[u8], name: &str) -> Result<ModelParts> {
    let file = ModelFile::new(name, ModelFormat::XgboostUbjson);
    let value = super::ubjson::decode(bytes).map_err(|detail| file.error(detail))?;
    Reader { file }.model(&value)
}

/// How far inside (0, 1) XGBoost holds a logistic `base_score` before taking its logit.
const LOGIT_EPS: f32 = 1e-6;

/// The JSON tokens XGBoost writes for non-finite numbers (its reader takes them; JSON has none).
const NON_FINITE: [(&str, f64); 3] = [("NaN", f64::NAN), ("Infinity", f64::INFINITY), ("-Infinity", f64::NEG_INFINITY)];

/// XGBoost's name of a non-finite number (`NaN`, `Infinity`, `-Infinity`).
pub(super) fn non_finite_name(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    }
}

/// `bytes` with XGBoost's bare `NaN`, `Infinity` and `-Infinity` tokens (a split at an infinite
/// threshold, say) quoted, so a JSON parser takes them; the reader turns those strings back
/// into numbers. Unchanged (borrowed) when there are none.
fn quote_non_finite(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let (mut out, mut in_string, mut escaped, mut copied) = (Vec::new(), false, false, 0);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            (in_string, escaped) = (escaped || b != b'"', !escaped && b == b'\\');
        } else if b == b'"' {
            in_string = true;
        } else if let Some((token, _)) = NON_FINITE.iter().find(|(t, _)| bytes[i..].starts_with(t.as_bytes())) {
            out.extend_from_slice(&bytes[copied..i]);
            out.push(b'"');
            out.extend_from_slice(token.as_bytes());
            out.push(b'"');
            i += token.len();
            copied = i;
            continue;
        }
        i += 1;
    }
    if copied == 0 {
        return std::borrow::Cow::Borrowed(bytes);
    }
    out.extend_from_slice(&bytes[copied..]);
    std::borrow::Cow::Owned(out)
}

struct Reader<'a> {
    file: ModelFile<'a>,
}

impl Reader<'_> {
    fn err(&self, detail: impl Into<String>) -> Error {
        self.file.error(detail)
    }

    fn field<'v>(&self, v: &'v Value, path: &str, key: &str) -> Result<&'v Value> {
        v.get(key).ok_or_else(|| self.err(format!("missing field {path}.{key}")))
    }

    /// XGBoost writes most scalars in `*_param` objects as strings ("8", "5E-1").
    fn number(&self, v: &Value, what: &str) -> Result<f64> {
        match v {
            Value::Number(n) => n.as_f64().ok_or_else(|| self.err(format!("{what} is not a number"))),
            Value::String(s) => s.trim().parse::<f64>().map_err(|_| self.err(format!("{what} = {s:?} is not a number"))),
            _ => Err(self.err(format!("{what} is not a number: {v}"))),
        }
    }

    fn count(&self, v: &Value, what: &str) -> Result<usize> {
        let x = self.number(v, what)?;
        if x < 0.0 || x.fract() != 0.0 || x > u32::MAX as f64 {
            return Err(self.err(format!("{what} = {x} is not a count")));
        }
        Ok(x as usize)
    }

    fn model(&self, root: &Value) -> Result<ModelParts> {
        let learner = self.field(root, "", "learner")?;
        let version = root.get("version").and_then(Value::as_array).map(|v| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("."));
        let lmp = self.field(learner, "learner", "learner_model_param")?;
        let num_feature = self.count(self.field(lmp, "learner_model_param", "num_feature")?, "num_feature")?;
        let num_class = match lmp.get("num_class") {
            Some(v) => self.count(v, "num_class")?,
            None => 0,
        };
        let num_target = match lmp.get("num_target") {
            Some(v) => self.count(v, "num_target")?,
            None => 1,
        };
        let num_groups = num_class.max(num_target).max(1);
        check_count(num_groups, MAX_GROUPS, "learner_model_param.num_class").map_err(|e| self.err(e))?;
        check_count(num_feature, MAX_FEATURES, "learner_model_param.num_feature").map_err(|e| self.err(e))?;

        let objective = learner.get("objective").and_then(|o| o.get("name")).and_then(Value::as_str).unwrap_or("reg:squarederror").to_string();

        let base_margin = self.base_margin(lmp, &objective, num_groups)?;
        let (feature_names, feature_kinds) = self.features(learner, num_feature)?;

        let booster = self.field(learner, "learner", "gradient_booster")?;
        let booster_name = booster.get("name").and_then(Value::as_str).unwrap_or("gbtree");
        let (model, weights) = match booster_name {
            "gbtree" => (self.field(booster, "gradient_booster", "model")?, None),
            "dart" => {
                let inner = self.field(booster, "gradient_booster", "gbtree")?;
                let w = self.field(booster, "gradient_booster", "weight_drop")?;
                let w = self.f64_array(w, "gradient_booster.weight_drop")?;
                (self.field(inner, "gradient_booster.gbtree", "model")?, Some(w))
            }
            "gblinear" => {
                return Err(self.file.unsupported(
                    "booster gblinear is a linear model, not trees; its SHAP values are coef * (x - mean(x)) and need the training means",
                ))
            }
            other => return Err(self.err(format!("unknown booster {other:?}"))),
        };

        let categories = self.categories(model, num_feature)?;
        let trees_json = self.field(model, "model", "trees")?.as_array().ok_or_else(|| self.err("model.trees is not an array"))?;
        let tree_info = match model.get("tree_info") {
            Some(v) => self.f64_array(v, "model.tree_info")?,
            None => vec![0.0; trees_json.len()],
        };
        if tree_info.len() != trees_json.len() {
            return Err(self.err(format!("model.tree_info has {} entries for {} trees", tree_info.len(), trees_json.len())));
        }
        if let Some(w) = &weights {
            if w.len() != trees_json.len() {
                return Err(self.err(format!("dart weight_drop has {} entries for {} trees", w.len(), trees_json.len())));
            }
        }

        let mut trees = Vec::with_capacity(trees_json.len());
        for (t, tj) in trees_json.iter().enumerate() {
            let group = as_index(tree_info[t], num_groups).ok_or_else(|| {
                self.file.tree_error(t, 0, format!("model.tree_info[{t}] = {:?} is not an output group (the model has {num_groups})", tree_info[t]))
            })?;
            let weight = weights.as_ref().map_or(1.0, |w| w[t]);
            trees.extend(self.tree(tj, t, group, weight, &feature_kinds, num_groups)?);
        }

        Ok(ModelParts {
            format: self.file.format(),
            library_version: version,
            objective,
            feature_names,
            feature_kinds,
            num_groups,
            base_margin,
            trees,
            precision: Precision::F32,
            categories,
            combinations: None,
        })
    }

    /// The training categories XGBoost (3.1+) stores for models trained on pandas or Arrow
    /// categorical data: `model.cats.enc` holds, per feature, either strings (`values` as UTF-8
    /// bytes cut by `offsets`) or numbers (`values`); empty for numeric features. Code `k` is
    /// the `k`-th category. Older models and models trained on codes have none.
    fn categories(&self, model: &Value, nf: usize) -> Result<Vec<Option<Categories>>> {
        let Some(enc) = model.get("cats").and_then(|c| c.get("enc")) else { return Ok(vec![None; nf]) };
        let enc = enc.as_array().ok_or_else(|| self.err("model.cats.enc is not an array"))?;
        if enc.is_empty() {
            return Ok(vec![None; nf]);
        }
        if enc.len() != nf {
            return Err(self.err(format!("model.cats.enc has {} entries for {nf} features", enc.len())));
        }
        let mut out = Vec::with_capacity(nf);
        for (j, e) in enc.iter().enumerate() {
            let at = |key: &str| format!("model.cats.enc[{j}].{key}");
            let values = match e.get("values") {
                Some(v) => self.f64_array(v, &at("values"))?,
                None => Vec::new(),
            };
            let categories = match e.get("offsets") {
                Some(offsets) => {
                    let offsets = self.f64_array(offsets, &at("offsets"))?;
                    if offsets.is_empty() {
                        None
                    } else {
                        Some(Categories::Names(self.category_names(&offsets, &values, &at("values"))?))
                    }
                }
                None if values.is_empty() => None,
                None => Some(Categories::Numbers(values)),
            };
            out.push(categories);
        }
        Ok(out)
    }

    /// Strings stored as UTF-8 `bytes` cut at `offsets` (an Arrow-style string array).
    fn category_names(&self, offsets: &[f64], bytes: &[f64], what: &str) -> Result<Vec<String>> {
        let bytes: Vec<u8> = bytes
            .iter()
            .map(|&b| as_index(b, 256).map(|b| b as u8).ok_or_else(|| self.err(format!("{what} holds {b}, not a byte"))))
            .collect::<Result<_>>()?;
        let mut names = Vec::with_capacity(offsets.len().saturating_sub(1));
        for w in offsets.windows(2) {
            let start = as_index(w[0], bytes.len() + 1);
            let end = as_index(w[1], bytes.len() + 1);
            let (Some(start), Some(end)) = (start, end) else {
                return Err(self.err(format!("{what}: offsets {} .. {} point outside its {} bytes", w[0], w[1], bytes.len())));
            };
            if start > end {
                return Err(self.err(format!("{what}: offsets {start} .. {end} run backwards")));
            }
            let name =
                std::str::from_utf8(&bytes[start..end]).map_err(|e| self.err(format!("{what}: category {} is not UTF-8 ({e})", names.len())))?;
            names.push(name.to_string());
        }
        Ok(names)
    }

    /// `base_score` is stored in the objective's output space (a probability for logistic
    /// objectives, a mean for log-link ones); XGBoost turns it into a margin with the
    /// objective's `ProbToMargin`, in float32. 3.x stores a vector (one per target/class).
    fn base_margin(&self, lmp: &Value, objective: &str, groups: usize) -> Result<Vec<f64>> {
        let raw = match lmp.get("base_score") {
            None => vec![0.5],
            Some(Value::String(s)) if s.trim_start().starts_with('[') => {
                let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
                inner
                    .split(',')
                    .map(|p| p.trim().parse::<f64>().map_err(|_| self.err(format!("base_score {s:?} is not a list of numbers"))))
                    .collect::<Result<Vec<_>>>()?
            }
            Some(Value::Array(a)) => a.iter().map(|v| self.number(v, "base_score")).collect::<Result<Vec<_>>>()?,
            Some(v) => vec![self.number(v, "base_score")?],
        };
        let raw = match raw.len() {
            1 => vec![raw[0]; groups],
            n if n == groups => raw,
            n => return Err(self.err(format!("base_score has {n} values for {groups} output groups"))),
        };
        raw.into_iter().map(|b| self.prob_to_margin(objective, b)).collect()
    }

    fn prob_to_margin(&self, objective: &str, b: f64) -> Result<f64> {
        let b32 = b as f32;
        // binary:logitraw keeps base_score as a margin (XGBoost 2+: its ProbToMargin is the
        // identity; the loader applies the running XGBoost's rule, whatever wrote the file).
        let logit = ["binary:logistic", "reg:logistic"];
        let log = ["count:poisson", "reg:gamma", "reg:tweedie", "survival:cox", "survival:aft"];
        let m = if logit.contains(&objective) {
            if !(0.0..=1.0).contains(&b32) {
                return Err(self.err(format!("base_score {b} must be in [0, 1] for {objective}")));
            }
            // XGBoost 3 takes 0 and 1 (all labels alike) and keeps the margin finite: the
            // probability is held 1e-6 inside (0, 1) first.
            let p = b32.clamp(LOGIT_EPS, 1.0 - LOGIT_EPS);
            -(1.0f32 / p - 1.0).ln()
        } else if log.contains(&objective) {
            if b32 < 0.0 {
                return Err(self.err(format!("base_score {b} must not be negative for {objective}")));
            }
            // 0 (all labels 0) is a margin of -inf, as in XGBoost.
            b32.ln()
        } else {
            b32
        };
        Ok(m as f64)
    }

    fn features(&self, learner: &Value, n: usize) -> Result<(Vec<String>, Vec<FeatureKind>)> {
        let names: Vec<String> = match learner.get("feature_names").and_then(Value::as_array) {
            Some(a) if !a.is_empty() => a.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect(),
            _ => (0..n).map(|i| format!("f{i}")).collect(),
        };
        if names.len() != n {
            return Err(self.err(format!("{} feature_names for num_feature = {n}", names.len())));
        }
        let kinds = match learner.get("feature_types").and_then(Value::as_array) {
            Some(a) if !a.is_empty() => {
                if a.len() != n {
                    return Err(self.err(format!("{} feature_types for num_feature = {n}", a.len())));
                }
                a.iter()
                    .map(|v| match v.as_str() {
                        Some("c") => FeatureKind::Categorical,
                        _ => FeatureKind::Numeric,
                    })
                    .collect()
            }
            _ => vec![FeatureKind::Numeric; n],
        };
        Ok((names, kinds))
    }

    fn f64_array(&self, v: &Value, what: &str) -> Result<Vec<f64>> {
        let a = v.as_array().ok_or_else(|| self.err(format!("{what} is not an array")))?;
        a.iter()
            .enumerate()
            .map(|(i, x)| match x {
                Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::NAN)),
                Value::Bool(b) => Ok(*b as u8 as f64),
                Value::String(s) => {
                    NON_FINITE.iter().find(|(t, _)| t == s).map(|(_, v)| *v).ok_or_else(|| self.err(format!("{what}[{i}] = {s:?} is not a number")))
                }
                Value::Null => Err(self.err(format!("{what}[{i}] is null, not a number"))),
                _ => Err(self.err(format!("{what}[{i}] is not a number"))),
            })
            .collect()
    }

    /// Reads tree `t`: one tree, or for a vector-leaf tree one tree per target (see
    /// [`Reader::leaf_vectors`]).
    fn tree(&self, tj: &Value, t: usize, group: usize, weight: f64, kinds: &[FeatureKind], num_groups: usize) -> Result<Vec<Tree>> {
        let at = |key: &str| format!("trees[{t}].{key}");
        let arr = |key: &str| -> Result<Vec<f64>> {
            let v = tj.get(key).ok_or_else(|| self.err(format!("missing field {}", at(key))))?;
            self.f64_array(v, &at(key))
        };
        let opt_arr = |key: &str| -> Result<Vec<f64>> {
            match tj.get(key) {
                Some(v) => self.f64_array(v, &at(key)),
                None => Ok(vec![]),
            }
        };
        let leaf_size = match tj.get("tree_param").and_then(|tp| tp.get("size_leaf_vector")) {
            Some(s) => self.count(s, &at("tree_param.size_leaf_vector"))?,
            None => 1,
        };
        if leaf_size > 1 && leaf_size != num_groups {
            return Err(self.err(format!("{} = {leaf_size}, but the model has {num_groups} targets", at("tree_param.size_leaf_vector"))));
        }
        let left = arr("left_children")?;
        let right = arr("right_children")?;
        let feature = arr("split_indices")?;
        // Float32 in XGBoost. A JSON file prints each as its shortest decimal, which read as f64
        // is not the float32 value (0.1 vs 0.100000001...); round back, so a JSON model and the
        // same model as UBJSON (raw float32) give the same bits.
        let to_f32 = |v: Vec<f64>| -> Vec<f64> { v.into_iter().map(|x| x as f32 as f64).collect() };
        let cond = to_f32(arr("split_conditions")?);
        let default_left = arr("default_left")?;
        let cover = to_f32(arr("sum_hessian")?);
        let split_type = opt_arr("split_type")?;
        let n = left.len();
        for (key, len) in [
            ("right_children", right.len()),
            ("split_indices", feature.len()),
            ("split_conditions", cond.len()),
            ("default_left", default_left.len()),
            ("sum_hessian", cover.len()),
        ] {
            if len != n {
                return Err(self.err(format!("{} has {len} entries but left_children has {n}", at(key))));
            }
        }
        if !split_type.is_empty() && split_type.len() != n {
            return Err(self.err(format!("{} has {} entries for {n} nodes", at("split_type"), split_type.len())));
        }

        // Categorical splits: categories_nodes[k] owns categories[segments[k] .. + sizes[k]].
        let cat_nodes = opt_arr("categories_nodes")?;
        let cat_segments = opt_arr("categories_segments")?;
        let cat_sizes = opt_arr("categories_sizes")?;
        let categories = opt_arr("categories")?;
        if cat_segments.len() != cat_nodes.len() || cat_sizes.len() != cat_nodes.len() {
            return Err(self.err(format!("{}: categories_nodes/segments/sizes differ in length", at("categories"))));
        }
        let mut words = Vec::new();
        let mut node_cats = vec![None; n];
        for k in 0..cat_nodes.len() {
            let node = as_index(cat_nodes[k], n)
                .ok_or_else(|| self.err(format!("{}[{k}] = {:?} is not a node of the tree ({n} nodes)", at("categories_nodes"), cat_nodes[k])))?;
            // Segment start and size as indices into `categories` (the end may equal its length).
            let seg = as_index(cat_segments[k], categories.len() + 1);
            let size = seg.and_then(|s| as_index(cat_sizes[k], categories.len() - s + 1));
            let (Some(seg), Some(size)) = (seg, size) else {
                return Err(self.file.tree_error(
                    t,
                    node,
                    format!(
                        "category list (segment {:?}, size {:?}) points outside the tree's {} categories",
                        cat_segments[k],
                        cat_sizes[k],
                        categories.len()
                    ),
                ));
            };
            let codes = &categories[seg..seg + size];
            let max = codes.iter().fold(0.0f64, |m, &c| m.max(c));
            if codes.iter().any(|&c| c < 0.0 || c.fract() != 0.0 || c >= 16_777_216.0) {
                return Err(self.file.tree_error(t, node, "category codes must be integers in [0, 2^24)"));
            }
            let nwords = if size == 0 { 0 } else { max as usize / 32 + 1 };
            let start = words.len();
            // One code near 2^24 makes a 2 MiB bitset: bound the tree's total, which the file's
            // size does not.
            if start + nwords > MAX_CATEGORY_WORDS {
                return Err(self.file.tree_error(t, node, format!("category sets need more than {} MiB of bitsets", (MAX_CATEGORY_WORDS * 4) >> 20)));
            }
            words.resize(start + nwords, 0u32);
            for &c in codes {
                let c = c as usize;
                words[start + c / 32] |= 1 << (c % 32);
            }
            node_cats[node] = Some((start as u32, nwords as u32));
        }

        let child = |c: f64, node: usize| -> Result<u32> {
            if c == -1.0 {
                Ok(LEAF)
            } else {
                as_index(c, n)
                    .map(|c| c as u32)
                    .ok_or_else(|| self.file.tree_error(t, node, format!("child index {c} is out of range (tree has {n} nodes)")))
            }
        };

        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let l = child(left[i], i)?;
            if l == LEAF {
                // A vector leaf's values are filled in per target below.
                nodes.push(Node::leaf(if leaf_size > 1 { 0.0 } else { cond[i] }, cover[i]));
                continue;
            }
            let r = child(right[i], i)?;
            let f = as_index(feature[i], kinds.len()).ok_or_else(|| {
                self.file.tree_error(t, i, format!("splits on feature {:?} but the model has {} features", feature[i], kinds.len()))
            })?;
            let is_cat = split_type.get(i).copied().unwrap_or(0.0) == 1.0;
            let (rule, categories) = if is_cat {
                let cats = node_cats[i].ok_or_else(|| self.file.tree_error(t, i, "categorical split without a category list"))?;
                (SplitRule::XgbCategories, cats)
            } else {
                (SplitRule::XgbLess { threshold: cond[i] }, (0, 0))
            };
            nodes.push(Node {
                left: l,
                right: r,
                feature: f as u32,
                rule,
                default_left: default_left[i] != 0.0,
                categories,
                cover: cover[i],
                value: 0.0,
            });
        }
        let tree = Tree { nodes, category_words: words, group, weight, linear_leaves: vec![] };
        // XGBoost 1.x writes size_leaf_vector "0" for scalar leaves.
        if leaf_size <= 1 {
            return Ok(vec![tree]);
        }
        self.leaf_vectors(tj, t, tree, leaf_size, &left, &right)
    }

    /// Splits a vector-leaf tree (`multi_strategy="multi_output_tree"`) into one scalar tree per
    /// target, with the same splits and covers and the target's leaf values. SHAP values are
    /// linear in the leaf values, so each target's attributions are those of its tree, and every
    /// engine explains these models. XGBoost 3.x numbers leaves into `leaf_weights` (`size`
    /// values per leaf) through the leaf's `right_children` entry; a file without
    /// `leaf_weights` keeps each node's vector in `base_weights`.
    fn leaf_vectors(&self, tj: &Value, t: usize, tree: Tree, size: usize, left: &[f64], right: &[f64]) -> Result<Vec<Tree>> {
        let at = |key: &str| format!("trees[{t}].{key}");
        let (weights, by_leaf_index) = match tj.get("leaf_weights") {
            Some(v) => (self.f64_array(v, &at("leaf_weights"))?, true),
            None => {
                let v = tj
                    .get("base_weights")
                    .ok_or_else(|| self.err(format!("{} has vector leaves but neither leaf_weights nor base_weights", at(""))))?;
                (self.f64_array(v, &at("base_weights"))?, false)
            }
        };
        let slots = weights.len() / size;
        let mut per_target: Vec<Tree> = (0..size).map(|g| Tree { group: g, ..tree.clone() }).collect();
        for i in (0..tree.nodes.len()).filter(|&i| left[i] == -1.0) {
            let slot = if by_leaf_index { as_index(right[i], slots) } else { Some(i).filter(|&i| i < slots) };
            let slot = slot.ok_or_else(|| {
                self.file.tree_error(
                    t,
                    i,
                    format!(
                        "leaf vector {} is out of range: the tree stores {slots} vectors of {size} values",
                        if by_leaf_index { right[i] } else { i as f64 }
                    ),
                )
            })?;
            for (g, tree) in per_target.iter_mut().enumerate() {
                // Float32 in XGBoost, as the scalar leaves in `tree`.
                tree.nodes[i].value = weights[slot * size + g] as f32 as f64;
            }
        }
        Ok(per_target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_non_finite_tokens_are_quoted_and_strings_are_left_alone() {
        let json = br#"{"a":[NaN,-Infinity,Infinity,1.5],"NaN":"Infinity \"NaN\"","b":-1}"#;
        let quoted = quote_non_finite(json);
        let value: Value = serde_json::from_slice(&quoted).unwrap();
        assert_eq!(value["a"], serde_json::json!(["NaN", "-Infinity", "Infinity", 1.5]));
        assert_eq!(value["NaN"], "Infinity \"NaN\"");
        assert_eq!(value["b"], -1);
        assert!(matches!(quote_non_finite(br#"{"a":[1,2]}"#), std::borrow::Cow::Borrowed(_)));
    }
}
