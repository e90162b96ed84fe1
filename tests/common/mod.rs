//! Helpers shared by the integration tests: fixture discovery and loading.
#![allow(dead_code)]

pub mod random;
pub mod server;
#[cfg(feature = "sql")]
pub mod sql;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shapfusion::engine::FeatureBlock;
use shapfusion::model::Model;

/// Directory of the committed fixtures: `SHAPFUSION_FIXTURES` when set (a test binary carried
/// to another machine, as `benchmarks/gpu.sh` does), else the source tree's.
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("SHAPFUSION_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
    }
}

/// One fixture: model, input rows and the library's reference outputs.
#[derive(Clone)]
pub struct Fixture {
    pub name: String,
    pub dir: PathBuf,
    pub model_path: PathBuf,
    pub model: Arc<Model>,
    pub batch: RecordBatch,
    pub expected: serde_json::Value,
}

impl Fixture {
    pub fn block(&self) -> FeatureBlock {
        self.model.feature_block(&self.batch).unwrap()
    }

    pub fn expected_f64(&self, key: &str) -> Option<Vec<f64>> {
        self.expected.get(key)?.as_array().map(|a| a.iter().map(|v| v.as_f64().unwrap()).collect())
    }

    pub fn input_path(&self) -> PathBuf {
        self.dir.join("input.parquet")
    }

    /// The smallest background committed beside the fixture (`background_<rows>.parquet`), if any.
    pub fn background(&self) -> Option<PathBuf> {
        let size = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().to_str()?.strip_prefix("background_")?.strip_suffix(".parquet")?.parse::<usize>().ok())
            .min()?;
        Some(self.dir.join(format!("background_{size}.parquet")))
    }
}

pub fn read_parquet(path: &Path) -> RecordBatch {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap().build().unwrap();
    let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

/// Every fixture directory (those with an expected.json).
pub fn fixtures() -> Vec<Fixture> {
    let list = fixtures_in(&fixtures_dir());
    assert!(list.len() >= 10, "fixtures missing: run tests/make_fixtures.py");
    list
}

/// The fixtures of models with CatBoost CTRs of feature combinations (`fixtures/combinations`,
/// kept apart: most engines refuse such models, and [`fixtures`] is run through every engine).
pub fn combination_fixtures() -> Vec<Fixture> {
    fixtures_in(&fixtures_dir().join("combinations"))
}

/// The fixtures of LightGBM linear trees (`fixtures/linear`, from
/// `tests/make_linear_tree_fixtures.py`; kept apart: only interventional values take them).
pub fn linear_fixtures() -> Vec<Fixture> {
    fixtures_in(&fixtures_dir().join("linear"))
}

/// The fixture directories (those with an expected.json) directly under `root`, in name order.
fn fixtures_in(root: &Path) -> Vec<Fixture> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("expected.json").exists()).collect();
    dirs.sort();
    dirs.into_iter()
        .map(|dir| {
            let model_path = ["model.json", "model.ubj", "model.txt", "model"].iter().map(|m| dir.join(m)).find(|p| p.exists()).unwrap();
            let model = Arc::new(shapfusion::load_model(&model_path).unwrap_or_else(|e| panic!("{}: {e}", dir.display())));
            let batch = read_parquet(&dir.join("input.parquet"));
            let expected = serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
            Fixture { name: dir.file_name().unwrap().to_string_lossy().into(), dir: dir.clone(), model_path, model, batch, expected }
        })
        .collect()
}

/// Largest |a - b| over a row, relative to the largest |b| of that row (floored at 1e-12); NaN
/// (the first such row) where a value is NaN in one and not the other: `f64::max` drops a NaN,
/// so a plain fold would pass a NaN result as no error.
pub fn max_row_rel_error(a: &[f64], b: &[f64], row_width: usize) -> (f64, usize) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let mut worst = (0.0, 0);
    for (r, (ra, rb)) in a.chunks(row_width).zip(b.chunks(row_width)).enumerate() {
        let scale = rb.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
        let mut err = 0.0f64;
        for (x, y) in ra.iter().zip(rb) {
            if x == y || (x.is_nan() && y.is_nan()) {
                continue;
            }
            let diff = (x - y).abs();
            if diff.is_nan() {
                return (f64::NAN, r);
            }
            err = err.max(diff / scale);
        }
        if err > worst.0 {
            worst = (err, r);
        }
    }
    worst
}

/// Interventional Shapley values of every group by enumerating all coalitions: `v(S)` is the
/// mean margin of the hybrid rows (x on S, a background row elsewhere), from the model's own
/// prediction (checked against the library's margins by the fixture tests). Exponential in the features:
/// for small models.
pub fn brute_force_interventional(model: &Model, x: &[f64], background: &FeatureBlock) -> Vec<Vec<f64>> {
    let (m, g) = (model.num_features(), model.num_groups());
    let mut margin = vec![0.0; g];
    let v: Vec<Vec<f64>> = (0..1usize << m)
        .map(|s| {
            let mut mean = vec![0.0; g];
            for r in 0..background.rows() {
                let hybrid: Vec<f64> = (0..m).map(|k| if s & (1 << k) != 0 { x[k] } else { background.row(r)[k] }).collect();
                model.predict_row(&hybrid, &mut margin);
                mean.iter_mut().zip(&margin).for_each(|(a, b)| *a += b / background.rows() as f64);
            }
            mean
        })
        .collect();
    let factorial = |n: usize| (1..=n).map(|k| k as f64).product::<f64>();
    (0..g)
        .map(|k| {
            (0..m)
                .map(|i| {
                    (0..1usize << m)
                        .filter(|s| s & (1 << i) == 0)
                        .map(|s| {
                            let c = s.count_ones() as usize;
                            factorial(c) * factorial(m - c - 1) / factorial(m) * (v[s | 1 << i][k] - v[s][k])
                        })
                        .sum()
                })
                .collect()
        })
        .collect()
}

/// LightGBM models whose categorical features take integer codes, from NumPy, pandas numbers,
/// mixed and ordered pandas categories (tests/make_lgb_integer_category_fixtures.py).
pub const LIGHTGBM_INTEGER_CODED: [&str; 4] =
    ["lgb_int_categories_numpy", "lgb_int_categories_pandas", "lgb_mixed_categories", "lgb_ordered_category"];

/// The values of a SHAP output (a column per feature, then `bias`; a fixed-size list per
/// column for several groups) in the libraries' row-major layout, rows × groups × columns.
pub fn row_major(columns: &[arrow::array::ArrayRef], groups: usize) -> Vec<f64> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Float64Type;
    let rows = columns.first().map_or(0, |c| c.len());
    let width = columns.len();
    let mut out = vec![0.0; rows * groups * width];
    for (j, col) in columns.iter().enumerate() {
        let values = if groups == 1 {
            col.as_primitive::<Float64Type>().values().clone()
        } else {
            col.as_fixed_size_list().values().as_primitive::<Float64Type>().values().clone()
        };
        for r in 0..rows {
            for k in 0..groups {
                out[(r * groups + k) * width + j] = values[r * groups + k];
            }
        }
    }
    out
}

/// Asserts that SHAP values in the row-major layout are the fixture's library values within
/// `tolerance` of each row's largest |phi|.
pub fn assert_library_values(f: &Fixture, got: &[f64], tolerance: f64, what: &str) {
    let (err, row) = max_row_rel_error(got, &f.expected_f64("contribs").unwrap(), f.model.num_features() + 1);
    assert!(err <= tolerance, "{} ({what}): {err:.3e} from {} at row/group {row}", f.name, f.expected["library"]);
}

/// `batch` with column `name` replaced by `column` (its field takes the column's type).
pub fn with_column(batch: &RecordBatch, name: &str, column: arrow::array::ArrayRef) -> RecordBatch {
    use arrow::datatypes::{Field, Schema};
    let i = batch.schema().index_of(name).unwrap();
    let mut fields: Vec<Field> = batch.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut columns = batch.columns().to_vec();
    fields[i] = Field::new(name, column.data_type().clone(), true);
    columns[i] = column;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

/// E[f_t | x_S] of one tree under its covers, the path-dependent game: follow `x` on the
/// features `in_s` holds, average the children by cover elsewhere. By recursion, for the small
/// trees the brute-force tests enumerate coalitions on.
pub fn path_dependent_game(tree: &shapfusion::model::Tree, x: &[f64], in_s: &dyn Fn(u32) -> bool, node: usize) -> f64 {
    let n = &tree.nodes[node];
    if n.is_leaf() {
        return n.value * tree.weight;
    }
    let (l, r) = (n.left as usize, n.right as usize);
    if in_s(n.feature) {
        path_dependent_game(tree, x, in_s, if tree.goes_left(n, x[n.feature as usize]) { l } else { r })
    } else {
        let (cl, cr) = (tree.nodes[l].cover / n.cover, tree.nodes[r].cover / n.cover);
        cl * path_dependent_game(tree, x, in_s, l) + cr * path_dependent_game(tree, x, in_s, r)
    }
}

/// An Arrow IPC schema message the Arrow crate panics on rather than refuses (a float of a
/// precision it does not know), encapsulated as a file's `ARROW:schema` and a `FlightInfo`'s
/// schema hold it (a continuation marker, the flatbuffer's length, the flatbuffer): the schema of
/// a file the fuzzer found (`fuzz/regressions/input_rows/`).
pub fn undecodable_schema_ipc() -> Vec<u8> {
    use base64::Engine;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/input_rows/arrow_schema_unknown_float_precision.parquet");
    let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
    let metadata = reader.metadata().file_metadata().key_value_metadata().unwrap();
    let encoded = metadata.iter().find(|kv| kv.key == "ARROW:schema").and_then(|kv| kv.value.clone()).unwrap();
    let message = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
    assert_eq!(message[..4], [0xff; 4], "the file's schema is not an encapsulated IPC message");
    message
}

/// [`undecodable_schema_ipc`]'s flatbuffer alone, as a Flight message's `data_header` holds it.
pub fn undecodable_schema_message() -> Vec<u8> {
    let message = undecodable_schema_ipc();
    let len = u32::from_le_bytes(message[4..8].try_into().unwrap()) as usize;
    message[8..8 + len].to_vec()
}
