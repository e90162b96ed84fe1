//! CatBoost's binary model format: what `model.save_model(path)` writes by default (`.cbm`).
//!
//! The file is `CBM1`, the size of the model core as a little-endian u32, the core (a
//! FlatBuffers table `TModelCore` of CatBoost's schema `catboost/libs/model/flatbuffers/`), then
//! the parts the core names in `ModelPartIds` (the CTR tables of a model with CTR splits). The
//! core holds what the JSON export holds, laid out as the evaluator keeps it: every tree's
//! splits as indices of "binary features" (each float border, then each one-hot value, then each
//! CTR border), leaf values and weights of all trees in one array each, and a non-symmetric
//! tree's nodes as steps to their children. [`to_json`] rewrites the core as the JSON that
//! `save_model(path, format="json")` writes for the same model, and the JSON reader
//! ([`super::catboost`]) reads that, so both files of one model give one [`super::Model`]
//! (tested on every CatBoost fixture).
//!
//! CTR splits: the core lists each CTR (`CtrFeatures`: what it projects on, its type, prior,
//! shift, scale and borders) and the part `static_provider_v1` after it holds their tables, a
//! count and then, each with its size, a FlatBuffers `TCtrValueTable`: an open-addressing hash
//! of 12-byte buckets (the 64-bit key CatBoost's JSON gives, a u32 index; an empty bucket's key
//! is all ones) and the counts per index as i32 (one per class for `Borders` and `Buckets`, one
//! for `Counter` and `FeatureFreq`). They become the JSON's `features_info.ctrs` and `ctr_data`.
//!
//! Not read from this format, refused naming the split: splits on features estimated from text
//! or embeddings, and CTR splits of a file whose parts are not the one CTR part.
//!
//! Why not the `flatbuffers` crate: its checked access works through code that `flatc`
//! generates from the schema, a build-time tool this workspace would need for four primitive
//! reads (a table's field, a vector, a string, a scalar). [`Buf`] does those with every offset
//! and length checked against the bytes before use, so any file gives a model or an error.

use serde_json::{json, Map, Value};

/// The first bytes of a `.cbm` file.
pub(super) const MAGIC: &[u8; 4] = b"CBM1";

/// Deepest non-symmetric tree read (CatBoost grows at most 16 levels). The tree becomes nested
/// JSON values, which are built and dropped recursively: the bound keeps that depth small.
const MAX_NESTING: usize = 64;

type Detail = String;

/// Why a `.cbm` file gives no JSON.
#[derive(Debug)]
pub(super) enum Refusal {
    /// The file is not a valid model of the format: what is wrong where.
    Invalid(Detail),
    /// A valid model with a part this reader does not read yet: which, and what to do instead.
    NotRead(Detail),
}

impl From<Detail> for Refusal {
    fn from(detail: Detail) -> Self {
        Refusal::Invalid(detail)
    }
}

impl From<&str> for Refusal {
    fn from(detail: &str) -> Self {
        Refusal::Invalid(detail.into())
    }
}

/// The FlatBuffers core: reads with every position checked against its bytes.
#[derive(Clone, Copy)]
struct Buf<'a> {
    bytes: &'a [u8],
}

impl<'a> Buf<'a> {
    fn slice(&self, at: usize, len: usize) -> Result<&'a [u8], Detail> {
        at.checked_add(len).and_then(|end| self.bytes.get(at..end)).ok_or_else(|| {
            format!("the model core ends at byte {} before a value at byte {at} (the file looks truncated or damaged)", self.bytes.len())
        })
    }

    fn array<const N: usize>(&self, at: usize) -> Result<[u8; N], Detail> {
        Ok(self.slice(at, N)?.try_into().expect("a slice of N bytes"))
    }

    fn u32(&self, at: usize) -> Result<u32, Detail> {
        self.array(at).map(u32::from_le_bytes)
    }

    /// The string whose offset is stored at `at` (a vector of UTF-8 bytes).
    fn string(&self, at: usize) -> Result<&'a str, Detail> {
        let (start, len) = self.vector(self.follow(at)?, 1)?;
        std::str::from_utf8(self.slice(start, len)?).map_err(|e| format!("a string at byte {start} is not UTF-8 ({e})"))
    }

    /// The position an unsigned offset stored at `at` points to (FlatBuffers offsets count from
    /// where they are stored).
    fn follow(&self, at: usize) -> Result<usize, Detail> {
        let offset = self.u32(at)? as usize;
        at.checked_add(offset).filter(|&p| p < self.bytes.len()).ok_or_else(|| format!("an offset at byte {at} points outside the model core"))
    }

    /// The table at `pos`: its vtable is found by the signed offset stored at its start.
    fn table(&self, pos: usize) -> Result<Table<'a>, Detail> {
        let back = i32::from_le_bytes(self.array(pos)?) as i64;
        let vtable = usize::try_from(pos as i64 - back).map_err(|_| format!("the table at byte {pos} has its vtable before the core"))?;
        let vtable_len = u16::from_le_bytes(self.array(vtable)?) as usize;
        self.slice(vtable, vtable_len)?;
        Ok(Table { buf: *self, pos, vtable, fields: vtable_len.saturating_sub(4) / 2 })
    }

    /// A vector at `at`: its first element's position and its length, the whole of it within the
    /// core (checked before anything is sized by the length).
    fn vector(&self, at: usize, element_size: usize) -> Result<(usize, usize), Detail> {
        let len = self.u32(at)? as usize;
        let start = at + 4;
        self.slice(start, len.checked_mul(element_size).ok_or("a vector's length overflows")?)?;
        Ok((start, len))
    }
}

/// One FlatBuffers table: fields by their number in the schema (declaration order).
#[derive(Clone, Copy)]
struct Table<'a> {
    buf: Buf<'a>,
    pos: usize,
    vtable: usize,
    fields: usize,
}

impl<'a> Table<'a> {
    /// Where field `id` is stored, or `None` where the table does not hold it (its default).
    fn field(&self, id: usize) -> Result<Option<usize>, Detail> {
        if id >= self.fields {
            return Ok(None);
        }
        let offset = u16::from_le_bytes(self.buf.array(self.vtable + 4 + 2 * id)?) as usize;
        Ok((offset != 0).then_some(self.pos + offset))
    }

    fn scalar<const N: usize, T>(&self, id: usize, default: T, from: fn([u8; N]) -> T) -> Result<T, Detail> {
        match self.field(id)? {
            Some(at) => Ok(from(self.buf.array(at)?)),
            None => Ok(default),
        }
    }

    fn i32(&self, id: usize, default: i32) -> Result<i32, Detail> {
        self.scalar(id, default, i32::from_le_bytes)
    }

    fn u8(&self, id: usize, default: u8) -> Result<u8, Detail> {
        self.scalar(id, default, u8::from_le_bytes)
    }

    fn f64(&self, id: usize, default: f64) -> Result<f64, Detail> {
        self.scalar(id, default, f64::from_le_bytes)
    }

    fn table(&self, id: usize) -> Result<Option<Table<'a>>, Detail> {
        self.field(id)?.map(|at| self.buf.follow(at).and_then(|p| self.buf.table(p))).transpose()
    }

    fn string(&self, id: usize) -> Result<Option<&'a str>, Detail> {
        self.field(id)?.map(|at| self.buf.string(at)).transpose()
    }

    /// A vector of fixed-size elements, each decoded by `from`; empty where the table does not
    /// hold it.
    fn vec<const N: usize, T>(&self, id: usize, from: fn([u8; N]) -> T) -> Result<Vec<T>, Detail> {
        let Some(at) = self.field(id)? else { return Ok(Vec::new()) };
        let (start, len) = self.buf.vector(self.buf.follow(at)?, N)?;
        (0..len).map(|k| self.buf.array(start + k * N).map(from)).collect()
    }

    /// A vector of strings (each element an offset to one).
    fn strings(&self, id: usize) -> Result<Vec<&'a str>, Detail> {
        let Some(at) = self.field(id)? else { return Ok(Vec::new()) };
        let (start, len) = self.buf.vector(self.buf.follow(at)?, 4)?;
        (0..len).map(|k| self.buf.string(start + 4 * k)).collect()
    }

    /// A vector of tables (each element an offset to one).
    fn tables(&self, id: usize) -> Result<Vec<Table<'a>>, Detail> {
        let Some(at) = self.field(id)? else { return Ok(Vec::new()) };
        let (start, len) = self.buf.vector(self.buf.follow(at)?, 4)?;
        (0..len).map(|k| self.buf.follow(start + 4 * k).and_then(|p| self.buf.table(p))).collect()
    }
}

/// `TModelTrees`'s fields, numbered as CatBoost's schema declares them.
mod trees_field {
    pub const APPROX_DIMENSION: usize = 0;
    pub const TREE_SPLITS: usize = 1;
    pub const TREE_SIZES: usize = 2;
    pub const TREE_START_OFFSETS: usize = 3;
    pub const CAT_FEATURES: usize = 4;
    pub const FLOAT_FEATURES: usize = 5;
    pub const ONE_HOT_FEATURES: usize = 6;
    pub const CTR_FEATURES: usize = 7;
    pub const LEAF_VALUES: usize = 8;
    pub const LEAF_WEIGHTS: usize = 9;
    pub const NON_SYMMETRIC_STEP_NODES: usize = 10;
    pub const NON_SYMMETRIC_NODE_ID_TO_LEAF_ID: usize = 11;
    pub const SCALE: usize = 14;
    pub const BIAS: usize = 15;
    pub const MULTI_BIAS: usize = 16;
}

/// What one binary feature (a tree split's index) tests.
enum BinaryFeature {
    /// `x > border` on float feature `index` (CatBoost's feature index, not the column).
    Float { index: i32, border: f32 },
    /// Categorical feature `index` equal to the category whose hash is `value`.
    OneHot { index: i32, value: i32 },
    /// `ctr > border` for the CTR whose target border is `target_border_idx`.
    Ctr { border: f32, target_border_idx: i32 },
}

/// The part after the model core that holds the CTR tables (`ModelPartIds`).
const CTR_PART: &str = "static_provider_v1";

/// CatBoost's `ECtrType`, by its number in the schema.
const CTR_TYPES: [&str; 6] = ["Borders", "Buckets", "BinarizedTargetMeanValue", "FloatTargetMeanValue", "Counter", "FeatureFreq"];

/// A `TModelCtrBase` (what a CTR projects on, and its type) as the JSON's CTR identifier, the
/// key that ties a CTR of `features_info.ctrs` to its table in `ctr_data`; and the projection's
/// `elements` and the type's name.
fn ctr_identity(base: &Table) -> Result<(String, Value, &'static str), Detail> {
    let kind = base.u8(1, 0)?;
    let kind = *CTR_TYPES.get(kind as usize).ok_or_else(|| format!("a CTR has type {kind}, which CatBoost's schema does not define"))?;
    let mut elements = Vec::new();
    if let Some(combination) = base.table(0)? {
        for c in combination.vec(0, i32::from_le_bytes)? {
            elements.push(json!({"cat_feature_index": c, "combination_element": "cat_feature_value"}));
        }
        for (index, border) in
            combination.vec(1, |b: [u8; 8]| (i32::from_le_bytes([b[0], b[1], b[2], b[3]]), f32::from_le_bytes([b[4], b[5], b[6], b[7]])))?
        {
            elements.push(json!({"border": border as f64, "combination_element": "float_feature", "float_feature_index": index}));
        }
        for (index, value) in
            combination.vec(2, |b: [u8; 8]| (i32::from_le_bytes([b[0], b[1], b[2], b[3]]), i32::from_le_bytes([b[4], b[5], b[6], b[7]])))?
        {
            elements.push(json!({"cat_feature_index": index, "combination_element": "cat_feature_exact_value", "value": value}));
        }
    }
    let elements = Value::Array(elements);
    Ok((json!({"identifier": elements, "type": kind}).to_string(), elements, kind))
}

/// The tables of the CTR part (`bytes`, from its start to the end of the file) as the JSON's
/// `ctr_data`: per table, `{"hash_map": [key, count, ...], "hash_stride", "counter_denominator"}`.
/// Tables of types the JSON reader refuses by name (target means) are left out.
fn ctr_tables(bytes: &[u8]) -> Result<Map<String, Value>, Detail> {
    let part = Buf { bytes };
    let count = part.u32(0)? as usize;
    let mut at = 4;
    let mut tables = Map::new();
    for k in 0..count {
        let size = part.u32(at)? as usize;
        let table = Buf { bytes: part.slice(at + 4, size).map_err(|e| format!("CTR table {k}: {e}"))? };
        at += 4 + size;
        let bad = |e: Detail| format!("CTR table {k}: {e}");
        let root = table.table(table.follow(0).map_err(bad)?).map_err(bad)?;
        let base = root.table(0).map_err(bad)?.ok_or_else(|| bad("no ModelCtrBase".into()))?;
        let (identifier, _, kind) = ctr_identity(&base).map_err(bad)?;
        let per_index = match kind {
            "Borders" | "Buckets" => {
                let classes = root.i32(4, 0).map_err(bad)?;
                usize::try_from(classes)
                    .ok()
                    .filter(|c| (1..=super::MAX_GROUPS).contains(c))
                    .ok_or_else(|| bad(format!("{classes} target classes")))?
            }
            "Counter" | "FeatureFreq" => 1,
            _ => continue,
        };
        let buckets: Vec<u8> = root.vec(1, u8::from_le_bytes).map_err(bad)?;
        let counts: Vec<i32> = root
            .vec::<1, u8>(2, u8::from_le_bytes)
            .map_err(bad)?
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        if buckets.len() % 12 != 0 {
            return Err(bad(format!("its hash has {} bytes, not whole 12-byte buckets", buckets.len())));
        }
        let mut hash_map = Vec::new();
        for bucket in buckets.chunks_exact(12) {
            let key = u64::from_le_bytes(bucket[..8].try_into().expect("8 bytes"));
            if key == u64::MAX {
                continue; // an empty bucket
            }
            let index = u32::from_le_bytes(bucket[8..].try_into().expect("4 bytes")) as usize;
            let of_key = index
                .checked_mul(per_index)
                .and_then(|start| counts.get(start..start + per_index))
                .ok_or_else(|| bad(format!("a key's counts at index {index} are past the {} counts", counts.len())))?;
            hash_map.push(json!(key));
            for &c in of_key {
                hash_map.push(json!(u64::try_from(c).map_err(|_| bad(format!("a count of {c}")))?));
            }
        }
        let table = json!({"hash_map": hash_map, "hash_stride": 1 + per_index, "counter_denominator": root.i32(3, 0).map_err(bad)?});
        tables.insert(identifier, table);
    }
    Ok(tables)
}

/// The JSON that CatBoost's `save_model(path, format="json")` writes for the model in `bytes`
/// (a `.cbm` file), as far as [`super::catboost`] reads it.
pub(super) fn to_json(bytes: &[u8]) -> Result<Value, Refusal> {
    let rest = bytes.strip_prefix(MAGIC).ok_or("the file does not start with CBM1")?;
    let size = rest.get(..4).ok_or("the file ends in its header")?;
    let size = u32::from_le_bytes(size.try_into().expect("4 bytes")) as usize;
    let core = rest.get(4..).and_then(|r| r.get(..size)).ok_or_else(|| {
        format!(
            "the header gives a model core of {size} bytes, but the file holds {} after it (the file looks truncated)",
            rest.len().saturating_sub(4)
        )
    })?;
    let buf = Buf { bytes: core };
    let root = buf.table(buf.follow(0)?)?;
    let trees = root.table(1)?.ok_or("the model core holds no trees (TModelCore.ModelTrees)")?;
    let mut info = Map::new();
    for entry in root.tables(2)? {
        if let (Some(key), Some(value)) = (entry.string(0)?, entry.string(1)?) {
            info.insert(key.to_string(), Value::String(value.to_string()));
        }
    }

    use trees_field::*;
    let dims = trees.i32(APPROX_DIMENSION, 1)?;
    let dims = usize::try_from(dims)
        .ok()
        .filter(|&d| (1..=super::MAX_GROUPS).contains(&d))
        .ok_or_else(|| format!("ApproxDimension {dims} is not a count of outputs"))?;

    let mut features_info = Map::new();
    let mut binary = Vec::new();
    let mut float_features = Vec::new();
    for f in trees.tables(FLOAT_FEATURES)? {
        let index = f.i32(1, -1)?;
        let borders: Vec<f32> = f.vec(3, f32::from_le_bytes)?;
        binary.extend(borders.iter().map(|&border| BinaryFeature::Float { index, border }));
        let nan = match f.u8(5, 0)? {
            0 => "AsIs",
            1 => "AsFalse",
            2 => "AsTrue",
            other => return Err(format!("float feature {index} has NaN treatment {other}, which CatBoost's schema does not define").into()),
        };
        float_features.push(json!({
            "feature_index": index,
            "flat_feature_index": f.i32(2, -1)?,
            "feature_id": f.string(4)?.unwrap_or_default(),
            "has_nans": f.u8(0, 0)? != 0,
            "nan_value_treatment": nan,
            "borders": borders.iter().map(|&b| b as f64).collect::<Vec<_>>(),
        }));
    }
    let one_hot: Vec<(i32, Vec<i32>)> =
        trees.tables(ONE_HOT_FEATURES)?.iter().map(|t| Ok((t.i32(0, -1)?, t.vec(1, i32::from_le_bytes)?))).collect::<Result<_, Detail>>()?;
    for (index, values) in &one_hot {
        binary.extend(values.iter().map(|&value| BinaryFeature::OneHot { index: *index, value }));
    }
    let mut cat_features = Vec::new();
    for c in trees.tables(CAT_FEATURES)? {
        let index = c.i32(0, -1)?;
        let values: Vec<i32> = one_hot.iter().filter(|(i, _)| *i == index).flat_map(|(_, v)| v.iter().copied()).collect();
        cat_features.push(json!({
            "feature_index": index,
            "flat_feature_index": c.i32(1, -1)?,
            "feature_id": c.string(2)?.unwrap_or_default(),
            "values": values,
        }));
    }
    features_info.insert("float_features".into(), Value::Array(float_features));
    features_info.insert("categorical_features".into(), Value::Array(cat_features));
    // CTRs: their borders number the binary features after the one-hot values.
    let mut ctr_list = Vec::new();
    for (c, feature) in trees.tables(CTR_FEATURES)?.iter().enumerate() {
        let bad = |e: Detail| format!("CTR {c}: {e}");
        let ctr = feature.table(0).map_err(bad)?.ok_or_else(|| bad("no Ctr".into()))?;
        let base = ctr.table(0).map_err(bad)?.ok_or_else(|| bad("no Base".into()))?;
        let (identifier, elements, kind) = ctr_identity(&base).map_err(bad)?;
        let target_border_idx = ctr.i32(1, 0).map_err(bad)?;
        let borders: Vec<f32> = feature.vec(1, f32::from_le_bytes).map_err(bad)?;
        binary.extend(borders.iter().map(|&border| BinaryFeature::Ctr { border, target_border_idx }));
        let scalar = |id, default| ctr.scalar(id, default, f32::from_le_bytes).map(|x| x as f64).map_err(bad);
        ctr_list.push(json!({
            "identifier": identifier,
            "elements": elements,
            "ctr_type": kind,
            "target_border_idx": target_border_idx,
            "prior_numerator": scalar(2, 0.0)?,
            "prior_denomerator": scalar(3, 1.0)?,
            "shift": scalar(4, 0.0)?,
            "scale": scalar(5, 1.0)?,
            "borders": borders.iter().map(|&b| b as f64).collect::<Vec<_>>(),
        }));
    }
    let has_ctrs = !ctr_list.is_empty();
    features_info.insert("ctrs".into(), Value::Array(ctr_list));
    // The CTR tables: read where the file's one part after the core is the CTR part.
    let parts = root.strings(3)?;
    let ctr_data = match parts.as_slice() {
        [CTR_PART] => Some(ctr_tables(&rest[4 + size..])?),
        _ => None,
    };

    let splits: Vec<i32> = trees.vec(TREE_SPLITS, i32::from_le_bytes)?;
    let sizes: Vec<i32> = trees.vec(TREE_SIZES, i32::from_le_bytes)?;
    let starts: Vec<i32> = trees.vec(TREE_START_OFFSETS, i32::from_le_bytes)?;
    let values: Vec<f64> = trees.vec(LEAF_VALUES, f64::from_le_bytes)?;
    let weights: Vec<f64> = trees.vec(LEAF_WEIGHTS, f64::from_le_bytes)?;
    let steps: Vec<(u16, u16)> =
        trees.vec(NON_SYMMETRIC_STEP_NODES, |b: [u8; 4]| (u16::from_le_bytes([b[0], b[1]]), u16::from_le_bytes([b[2], b[3]])))?;
    let leaf_ids: Vec<u32> = trees.vec(NON_SYMMETRIC_NODE_ID_TO_LEAF_ID, u32::from_le_bytes)?;
    if starts.len() != sizes.len() {
        return Err(format!("{} tree sizes but {} tree start offsets", sizes.len(), starts.len()).into());
    }
    let split = |t: usize, node: usize| -> Result<Value, Refusal> {
        let k = splits.get(node).copied().ok_or_else(|| format!("tree {t} has a split past the end of the splits ({})", splits.len()))?;
        let not_read = |what: String| Err(Refusal::NotRead(what));
        match usize::try_from(k).ok().and_then(|k| binary.get(k)) {
            Some(BinaryFeature::Float { index, border }) => {
                Ok(json!({"split_index": k, "split_type": "FloatFeature", "float_feature_index": index, "border": *border as f64}))
            }
            Some(BinaryFeature::OneHot { index, value }) => Ok(json!({"split_index": k, "split_type": "OneHotFeature", "cat_feature_index": index, "value": value})),
            Some(BinaryFeature::Ctr { .. }) if ctr_data.is_none() => not_read(format!(
                "tree {t} splits on a CTR (binary feature {k}), and the file's parts after the model core are {parts:?}, not the one CTR part ({CTR_PART}) this reader reads; save the model with save_model(path, format=\"json\"), which shapfusion reads"
            )),
            Some(BinaryFeature::Ctr { border, target_border_idx }) => Ok(
                json!({"split_index": k, "split_type": "OnlineCtr", "border": *border as f64, "ctr_target_border_idx": target_border_idx}),
            ),
            None => not_read(format!(
                "tree {t} splits on binary feature {k}, which is no float border, one-hot value or CTR border of the file (a feature estimated from text or embeddings?): not read from CatBoost's binary format"
            )),
        }
    };
    let leaf_value = |t: usize, id: usize| -> Result<Value, Detail> {
        let v = id
            .checked_add(dims)
            .and_then(|end| values.get(id..end))
            .ok_or_else(|| format!("tree {t} has a leaf at value {id}, past the {} leaf values", values.len()))?;
        finite_leaves(t, v)?;
        Ok(if dims == 1 { json!(v[0]) } else { json!(v) })
    };

    let mut root_json = Map::new();
    if steps.is_empty() {
        // Oblivious trees: tree t's leaves (2^depth, each `dims` values) follow the earlier trees'.
        let (mut value_at, mut weight_at) = (0usize, 0usize);
        let mut list = Vec::with_capacity(sizes.len());
        for (t, (&size, &start)) in sizes.iter().zip(&starts).enumerate() {
            let depth =
                usize::try_from(size).ok().filter(|&d| d <= super::catboost::MAX_DEPTH).ok_or_else(|| format!("tree {t} has depth {size}"))?;
            let start = usize::try_from(start).map_err(|_| format!("tree {t} starts at split {start}"))?;
            let tree_splits = (start..start + depth).map(|node| split(t, node)).collect::<Result<Vec<_>, Refusal>>()?;
            let leaves = 1usize << depth;
            let tree_values = values
                .get(value_at..value_at + leaves * dims)
                .ok_or_else(|| format!("tree {t} needs leaf values past the {} of the file", values.len()))?;
            finite_leaves(t, tree_values)?;
            let mut tree = json!({"splits": tree_splits, "leaf_values": tree_values});
            if !weights.is_empty() {
                let w = weights
                    .get(weight_at..weight_at + leaves)
                    .ok_or_else(|| format!("tree {t} needs leaf weights past the {} of the file", weights.len()))?;
                tree["leaf_weights"] = json!(w);
            }
            value_at += leaves * dims;
            weight_at += leaves;
            list.push(tree);
        }
        root_json.insert("oblivious_trees".into(), Value::Array(list));
    } else {
        if steps.len() != splits.len() || leaf_ids.len() != splits.len() {
            return Err(format!("{} splits, {} step nodes and {} node leaf ids: one each per node", splits.len(), steps.len(), leaf_ids.len()).into());
        }
        let mut list = Vec::with_capacity(sizes.len());
        for (t, &start) in starts.iter().enumerate() {
            let end =
                starts.get(t + 1).map_or(Ok(splits.len()), |&e| usize::try_from(e).map_err(|_| format!("tree {} starts at node {e}", t + 1)))?;
            let start = usize::try_from(start)
                .ok()
                .filter(|&s| s < end && end <= splits.len())
                .ok_or_else(|| format!("tree {t} starts at node {start}, not before its end {end}"))?;
            list.push(non_symmetric(t, start, end, &steps, &leaf_ids, &weights, dims, &split, &leaf_value)?);
        }
        root_json.insert("trees".into(), Value::Array(list));
    }

    let scale = trees.f64(SCALE, 1.0)?;
    let multi_bias: Vec<f64> = trees.vec(MULTI_BIAS, f64::from_le_bytes)?;
    let bias = if multi_bias.is_empty() { vec![trees.f64(BIAS, 0.0)?] } else { multi_bias };
    if !scale.is_finite() || bias.iter().any(|b| !b.is_finite()) {
        return Err(format!("scale {scale} and bias {bias:?} must be finite").into());
    }
    root_json.insert("scale_and_bias".into(), json!([scale, bias]));
    root_json.insert("features_info".into(), Value::Object(features_info));
    if let (true, Some(tables)) = (has_ctrs, ctr_data) {
        root_json.insert("ctr_data".into(), Value::Object(tables));
    }
    let mut model_info = Map::new();
    // The training parameters (the objective among them) as CatBoost's JSON nests them; a
    // value that is not JSON only loses the objective's name.
    if let Some(params) = info.get("params").and_then(Value::as_str).and_then(|p| serde_json::from_str::<Value>(p).ok()) {
        model_info.insert("params".into(), params);
    }
    if let Some(version) = info.remove("catboost_version_info") {
        model_info.insert("catboost_version_info".into(), version);
    }
    root_json.insert("model_info".into(), Value::Object(model_info));
    Ok(Value::Object(root_json))
}

/// Refuses a tree's leaf values where one is not finite (CatBoost writes finite ones).
fn finite_leaves(t: usize, values: &[f64]) -> Result<(), Detail> {
    match values.iter().find(|x| !x.is_finite()) {
        Some(x) => Err(format!("tree {t} has a leaf value {x}, not a finite number")),
        None => Ok(()),
    }
}

/// Nodes `start..end` of a non-symmetric tree as the JSON's nested nodes. Node `i` steps to its
/// children at `i + left` and `i + right`; a step of 0 ends there: that child is a leaf whose
/// value is at `leaf_ids[i]` in the leaf values (a node with both steps 0 is a leaf itself).
/// Children come after their parent, so the nodes are built from the last one back, each taking
/// its children's values: no recursion, and each node is taken at most once.
#[allow(clippy::too_many_arguments)]
fn non_symmetric(
    t: usize,
    start: usize,
    end: usize,
    steps: &[(u16, u16)],
    leaf_ids: &[u32],
    weights: &[f64],
    dims: usize,
    split: &dyn Fn(usize, usize) -> Result<Value, Refusal>,
    leaf_value: &dyn Fn(usize, usize) -> Result<Value, Detail>,
) -> Result<Value, Refusal> {
    let leaf = |node: usize| -> Result<(Value, usize), Detail> {
        let id = leaf_ids[node] as usize;
        let mut json = json!({"value": leaf_value(t, id)?});
        if !weights.is_empty() {
            let w = weights
                .get(id / dims)
                .ok_or_else(|| format!("tree {t} has a leaf at weight {}, past the {} leaf weights", id / dims, weights.len()))?;
            json["weight"] = json!(w);
        }
        Ok((json, 1))
    };
    // (the node's JSON, its depth in levels)
    let mut built: Vec<Option<(Value, usize)>> = (start..end).map(|_| None).collect();
    for node in (start..end).rev() {
        let (left, right) = steps[node];
        let json = if (left, right) == (0, 0) {
            leaf(node)?
        } else {
            let mut child = |step: u16| -> Result<(Value, usize), Detail> {
                if step == 0 {
                    return leaf(node);
                }
                let c = node + step as usize;
                let slot = built
                    .get_mut(c.wrapping_sub(start))
                    .filter(|_| c < end)
                    .ok_or_else(|| format!("tree {t}: node {} steps to node {}, outside the tree", node - start, c - start))?;
                slot.take().ok_or_else(|| format!("tree {t}: node {} is the child of more than one node", c - start))
            };
            let ((l, dl), (r, dr)) = (child(left)?, child(right)?);
            let depth = 1 + dl.max(dr);
            if depth > MAX_NESTING {
                return Err(format!("tree {t} is more than {MAX_NESTING} levels deep").into());
            }
            (json!({"split": split(t, node)?, "left": l, "right": r}), depth)
        };
        built[node - start] = Some(json);
    }
    Ok(built[0].take().map(|(json, _)| json).ok_or_else(|| format!("tree {t}: its root is the child of another node"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str, file: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name).join(file);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_gives_an_error_or_a_model_never_a_panic() {
        // A small oblivious model and a non-symmetric one with leaves on one side of a split.
        for name in ["cb_one_hot_categories", "cb_lossguide_binary"] {
            let bytes = fixture(name, "model.cbm");
            assert!(to_json(&bytes).is_ok(), "{name}");
            for len in 0..bytes.len() {
                assert!(to_json(&bytes[..len]).is_err(), "{name}: the first {len} bytes");
            }
            for at in (0..bytes.len()).step_by(7) {
                let mut damaged = bytes.clone();
                damaged[at] ^= 0xa5;
                if let Ok(json) = to_json(&damaged) {
                    let _ = super::super::catboost::from_value(
                        &json,
                        super::super::ModelFile::new("damaged.cbm", super::super::ModelFormat::CatboostBinary),
                    );
                }
            }
        }
    }

    #[test]
    fn ctr_tables_are_those_of_the_json_export() {
        // Keys and counts per CTR, against the JSON CatBoost wrote for the same model (whose
        // hash_map also lists empty buckets, under the key 2^64 - 1, which no category has).
        for name in ["cb_ctr_regression", "cb_ctr_multiclass", "cb_lossguide_ctr"] {
            let ours = to_json(&fixture(name, "model.cbm")).unwrap();
            let theirs: Value = serde_json::from_slice(&fixture(name, "model.json")).unwrap();
            let entries = |table: &Value| -> Vec<Vec<u64>> {
                let stride = table["hash_stride"].as_u64().unwrap() as usize;
                let flat: Vec<u64> =
                    table["hash_map"].as_array().unwrap().iter().map(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()).unwrap()).collect();
                let mut rows: Vec<Vec<u64>> = flat.chunks(stride).filter(|row| row[0] != u64::MAX).map(<[u64]>::to_vec).collect();
                rows.sort();
                rows
            };
            let ctrs = |root: &Value| -> Vec<(Value, String, Vec<f64>)> {
                root["features_info"]["ctrs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        (c["elements"].clone(), c["ctr_type"].as_str().unwrap().to_string(), serde_json::from_value(c["borders"].clone()).unwrap())
                    })
                    .collect()
            };
            assert_eq!(ctrs(&ours), ctrs(&theirs), "{name}");
            for (ctr, theirs_ctr) in ours["features_info"]["ctrs"].as_array().unwrap().iter().zip(theirs["features_info"]["ctrs"].as_array().unwrap())
            {
                let (a, b) =
                    (&ours["ctr_data"][ctr["identifier"].as_str().unwrap()], &theirs["ctr_data"][theirs_ctr["identifier"].as_str().unwrap()]);
                assert_eq!(entries(a), entries(b), "{name}: {}", ctr["identifier"]);
                assert_eq!(a["counter_denominator"].as_f64(), b["counter_denominator"].as_f64(), "{name}");
            }
        }
    }
}
