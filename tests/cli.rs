//! The `shapfusion` binary end to end: outputs, layout, and every kind of bad input giving a
//! clear message and a non-zero exit (never a panic).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow::array::{Array, AsArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Float64Type, Schema};
use common::{fixtures, read_parquet};
use parquet::arrow::ArrowWriter;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shapfusion"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).env("RUST_LOG", "warn").output().expect("runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

// The exit statuses by kind of error (src/main.rs, the book's Errors chapter).
const INVALID_ARGUMENT: i32 = 64;
const BAD_DATA: i32 = 65;
const NOT_FOUND: i32 = 66;
const NOT_SUPPORTED: i32 = 78;

/// Runs a command that must fail cleanly with exit `status` (the kind of its error); returns its
/// message.
fn fails(status: i32, args: &[&str]) -> String {
    failed(status, &run(args))
}

/// Runs `explain` that must fail cleanly with exit `status`; returns its message.
fn explain_fails(status: i32, model: &Path, input: &Path, output: &Path, extra: &[&str]) -> String {
    failed(status, &explain(model, input, output, extra))
}

/// The message of a run that failed cleanly with exit `status`.
fn failed(status: i32, o: &Output) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(status), "expected exit {status}, got {:?}: {err}", o.status);
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

fn explain(model: &Path, input: &Path, output: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["explain", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "--output", output.to_str().unwrap()];
    args.extend_from_slice(extra);
    run(&args)
}

fn write_parquet(path: &Path, batch: &RecordBatch) {
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn fixture(name: &str) -> common::Fixture {
    fixtures().into_iter().find(|f| f.name == name).unwrap()
}

#[test]
fn explain_writes_the_library_numbers_in_the_documented_layout() {
    let dir = tmp();
    for f in fixtures() {
        let out = dir.path().join(format!("{}.parquet", f.name));
        let o = explain(&f.model_path, &f.input_path(), &out, &["--algorithm", "fast-v1"]);
        assert!(o.status.success(), "{}: {}", f.name, stderr(&o));
        let batch = read_parquet(&out);
        let g = f.model.num_groups();
        let names: Vec<String> = batch.schema().fields().iter().map(|x| x.name().clone()).collect();
        let mut want = f.model.feature_names().to_vec();
        want.push("bias".into());
        assert_eq!(names, want, "{}", f.name);
        assert_eq!(batch.num_rows(), f.batch.num_rows());
        if g > 1 {
            for col in batch.columns() {
                assert_eq!(col.data_type(), &DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float64, false)), g as i32));
            }
        }
        common::assert_library_values(&f, &common::row_major(batch.columns(), g), 1e-5, "explain");
    }
}

#[test]
fn interactions_column_has_xgboost_layout() {
    let f = fixture("xgb_multiclass");
    let dir = tmp();
    let out = dir.path().join("i.parquet");
    let o = explain(&f.model_path, &f.input_path(), &out, &["--interactions"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let batch = read_parquet(&out);
    assert_eq!(batch.num_columns(), 1);
    assert_eq!(batch.schema().field(0).name(), "interactions");
    let w = f.model.num_features() + 1;
    let list = batch.column(0).as_fixed_size_list();
    assert_eq!(list.value_length() as usize, 3 * w * w);
    let ours = list.values().as_primitive::<Float64Type>().values().to_vec();
    let (err, _) = common::max_row_rel_error(&ours, &f.expected_f64("interactions").unwrap(), w * w);
    assert!(err <= 1e-5, "{err}");
}

/// `explain --index banzhaf` writes WOODELF's Banzhaf values in the SHAP layout, the bias
/// column holding the margin minus their sum; another engine, or the GPU, is refused by name.
#[test]
fn index_banzhaf_writes_woodelfs_values_with_the_rest_in_the_bias() {
    let f = fixture("xgb_missing");
    let reference: serde_json::Value = serde_json::from_slice(&std::fs::read(f.dir.join("banzhaf.json")).unwrap()).unwrap();
    let want: Vec<f64> = reference["banzhaf_values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let dir = tmp();
    let out = dir.path().join("b.parquet");
    let o = explain(&f.model_path, &f.input_path(), &out, &["--index", "banzhaf"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let batch = read_parquet(&out);
    let got = common::row_major(batch.columns(), 1);
    let (nf, w) = (f.model.num_features(), f.model.num_features() + 1);
    let scale = want.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
    let block = f.block();
    let mut margin = [0.0];
    for r in 0..batch.num_rows() {
        let row = &got[r * w..(r + 1) * w];
        for i in 0..nf {
            assert!((row[i] - want[r * nf + i]).abs() <= 1e-4 * scale, "row {r} feature {i}: {} against WOODELF's {}", row[i], want[r * nf + i]);
        }
        f.model.predict_row(block.row(r), &mut margin);
        assert!((row.iter().sum::<f64>() - margin[0]).abs() <= 1e-9 * scale, "row {r}: values and bias against the margin {}", margin[0]);
    }
    let e = explain_fails(64, &f.model_path, &f.input_path(), &out, &["--index", "banzhaf", "--algorithm", "treeshap"]);
    assert!(e.contains("Shapley values only"), "{e}");
    let e = explain_fails(78, &f.model_path, &f.input_path(), &out, &["--index", "banzhaf", "--device", "gpu"]);
    assert!(e.contains("Shapley values only") && e.contains("device cpu or auto"), "{e}");
}

#[test]
fn thread_count_does_not_change_a_single_bit() {
    let f = fixture("xgb_deep");
    let dir = tmp();
    let outs: Vec<PathBuf> = ["1", "2"]
        .iter()
        .map(|t| {
            let out = dir.path().join(format!("t{t}.parquet"));
            let o = explain(&f.model_path, &f.input_path(), &out, &["--threads", t, "--batch-rows", "7"]);
            assert!(o.status.success(), "{}", stderr(&o));
            out
        })
        .collect();
    let (a, b) = (read_parquet(&outs[0]), read_parquet(&outs[1]));
    for (ca, cb) in a.columns().iter().zip(b.columns()) {
        let (va, vb) = (ca.as_primitive::<Float64Type>(), cb.as_primitive::<Float64Type>());
        assert!(va.values().iter().zip(vb.values()).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

#[test]
fn keep_copies_columns_and_csv_gives_the_same_numbers() {
    let f = fixture("lgb_regression");
    let dir = tmp();
    // Build a CSV with an id column and the fixture's rows (missing values as empty fields).
    let csv = dir.path().join("in.csv");
    let mut text = String::from("id,");
    text.push_str(&f.model.feature_names().join(","));
    text.push('\n');
    for r in 0..f.batch.num_rows() {
        text.push_str(&format!("row{r}"));
        for c in 0..f.batch.num_columns() {
            let col = f.batch.column(c).as_primitive::<Float64Type>();
            text.push(',');
            if col.is_valid(r) && !col.value(r).is_nan() {
                text.push_str(&format!("{:?}", col.value(r)));
            }
        }
        text.push('\n');
    }
    std::fs::write(&csv, text).unwrap();
    let out_csv = dir.path().join("csv.parquet");
    let o = explain(&f.model_path, &csv, &out_csv, &["--keep", "id"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out_pq = dir.path().join("pq.parquet");
    assert!(explain(&f.model_path, &f.input_path(), &out_pq, &[]).status.success());
    let (a, b) = (read_parquet(&out_csv), read_parquet(&out_pq));
    assert_eq!(a.schema().field(0).name(), "id");
    assert_eq!(a.column(0).as_any().downcast_ref::<StringArray>().unwrap().value(3), "row3");
    for j in 0..b.num_columns() {
        assert_eq!(a.column(j + 1).as_primitive::<Float64Type>().values(), b.column(j).as_primitive::<Float64Type>().values());
    }
}

/// Every batch of an Arrow IPC file.
fn read_arrow_ipc(path: &Path) -> RecordBatch {
    let reader = arrow::ipc::reader::FileReader::try_new(std::fs::File::open(path).unwrap(), None).unwrap();
    let schema = reader.schema();
    let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    arrow::compute::concat_batches(&schema, &batches).unwrap()
}

#[test]
fn arrow_ipc_input_and_output_give_the_parquet_numbers() {
    let f = fixture("xgb_multiclass");
    let dir = tmp();
    // The rows with an id first, which `--keep` copies (not a feature, and not a float).
    let mut fields: Vec<Field> = vec![Field::new("id", DataType::Int64, false)];
    fields.extend(f.batch.schema().fields().iter().map(|field| field.as_ref().clone()));
    let mut columns: Vec<Arc<dyn Array>> = vec![Arc::new(Int64Array::from_iter_values(0..f.batch.num_rows() as i64))];
    columns.extend(f.batch.columns().iter().cloned());
    let rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let parquet = dir.path().join("in.parquet");
    write_parquet(&parquet, &rows);
    let input = dir.path().join("in.arrow");
    let mut w = arrow::ipc::writer::FileWriter::try_new(std::fs::File::create(&input).unwrap(), &rows.schema()).unwrap();
    // Two batches, so the reader's batching is exercised.
    let half = rows.num_rows() / 2;
    w.write(&rows.slice(0, half)).unwrap();
    w.write(&rows.slice(half, rows.num_rows() - half)).unwrap();
    w.finish().unwrap();
    let out_pq = dir.path().join("pq.parquet");
    assert!(explain(&f.model_path, &parquet, &out_pq, &["--keep", "id"]).status.success());
    let want = read_parquet(&out_pq);
    // IPC in, Parquet out, also cut into batches smaller than the file's; Parquet in, IPC out
    // (by extension: .arrow and .feather).
    for batch_rows in ["7", "100000"] {
        let from_ipc = dir.path().join("from_ipc.parquet");
        let o = explain(&f.model_path, &input, &from_ipc, &["--keep", "id", "--batch-rows", batch_rows]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(read_parquet(&from_ipc), want, "--batch-rows {batch_rows}");
    }
    let want = read_parquet(&{
        let out = dir.path().join("no_keep.parquet");
        assert!(explain(&f.model_path, &f.input_path(), &out, &[]).status.success());
        out
    });
    for name in ["out.arrow", "out.feather"] {
        let out = dir.path().join(name);
        let o = explain(&f.model_path, &f.input_path(), &out, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(&std::fs::read(&out).unwrap()[..6], b"ARROW1", "{name}");
        assert_eq!(read_arrow_ipc(&out), want, "{name}");
    }
}

#[test]
fn category_names_from_parquet_and_csv_give_the_library_numbers_and_inspect_lists_them() {
    for name in ["xgb_named_categories", "lgb_named_categories"] {
        let f = fixture(name);
        let dir = tmp();
        // The input as a CSV file: names as text, nulls as empty fields.
        let csv = dir.path().join("in.csv");
        let columns: Vec<Arc<dyn Array>> = f
            .batch
            .columns()
            .iter()
            .map(|c| if matches!(c.data_type(), DataType::Dictionary(..)) { arrow::compute::cast(c, &DataType::Utf8).unwrap() } else { c.clone() })
            .collect();
        let fields: Vec<Field> =
            f.batch.schema().fields().iter().zip(&columns).map(|(x, c)| Field::new(x.name(), c.data_type().clone(), true)).collect();
        let text = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let mut w = arrow::csv::Writer::new(std::fs::File::create(&csv).unwrap());
        w.write(&text).unwrap();
        drop(w);
        let (from_parquet, from_csv) = (dir.path().join("p.parquet"), dir.path().join("c.parquet"));
        for (input, output) in [(f.input_path(), &from_parquet), (csv.clone(), &from_csv)] {
            let o = explain(&f.model_path, &input, output, &[]);
            assert!(o.status.success(), "{name} {}: {}", input.display(), stderr(&o));
        }
        assert_eq!(read_parquet(&from_parquet), read_parquet(&from_csv), "{name}: CSV and Parquet differ");
        common::assert_library_values(&f, &common::row_major(read_parquet(&from_parquet).columns(), 1), 1e-5, "explain");

        let o = run(&["models", "inspect", f.model_path.to_str().unwrap()]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("country: 5 stored categories: US, FR, DE, JP, BR"), "{name}: {out}");
        assert!(out.contains("tier: 3 stored categories: 10, 20, 35"), "{name}: {out}");
    }
}

#[test]
fn empty_input_gives_an_empty_output_with_the_schema() {
    let f = fixture("xgb_regression");
    let dir = tmp();
    let empty = dir.path().join("empty.parquet");
    write_parquet(&empty, &f.batch.slice(0, 0));
    let out = dir.path().join("out.parquet");
    let o = explain(&f.model_path, &empty, &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let file = std::fs::File::open(&out).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
    assert_eq!(reader.schema().fields().len(), f.model.num_features() + 1);
    assert_eq!(reader.schema().field(f.model.num_features()).name(), "bias");
}

/// An input (or background) without one of the model's columns is refused naming the column
/// and listing every column the file has, not only those the model reads.
#[test]
fn a_missing_feature_column_is_named_with_the_files_columns() {
    let f = fixture("xgb_regression");
    let dir = tmp();
    let missing = f.model.feature_names()[1].clone();
    let keep: Vec<usize> = (0..f.batch.num_columns()).filter(|&i| f.batch.schema().field(i).name() != &missing).collect();
    let lacking = f.batch.project(&keep).unwrap();
    // A column the model does not read, which only the whole file's list shows.
    let mut fields: Vec<Field> = lacking.schema().fields().iter().map(|field| field.as_ref().clone()).collect();
    fields.push(Field::new("application_id", DataType::Int64, false));
    let mut columns = lacking.columns().to_vec();
    columns.push(Arc::new(Int64Array::from_iter_values(0..lacking.num_rows() as i64)));
    let lacking = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let listed: Vec<&str> = lacking.schema_ref().fields().iter().map(|field| field.name().as_str()).collect::<Vec<_>>();
    assert!(listed.len() >= 2, "{listed:?}");
    let parquet = dir.path().join("lacking.parquet");
    write_parquet(&parquet, &lacking);
    let ipc = dir.path().join("lacking.arrow");
    let mut writer = arrow::ipc::writer::FileWriter::try_new(std::fs::File::create(&ipc).unwrap(), lacking.schema_ref()).unwrap();
    writer.write(&lacking).unwrap();
    writer.finish().unwrap();
    let out = dir.path().join("out.parquet");
    let (model, good, out_s) = (f.model_path.to_str().unwrap(), f.input_path(), out.to_str().unwrap());
    let (parquet, ipc, good) = (parquet.to_str().unwrap(), ipc.to_str().unwrap(), good.to_str().unwrap());
    // Inputs in both formats; backgrounds are Parquet or CSV.
    for args in [
        vec!["explain", "--model", model, "--input", parquet, "--output", out_s],
        vec!["explain", "--model", model, "--input", ipc, "--output", out_s],
        vec!["explain", "--model", model, "--input", good, "--output", out_s, "--background", parquet],
    ] {
        let err = fails(BAD_DATA, &args);
        assert!(err.contains(&format!("no column named {missing:?}")) && err.contains(&listed.join(", ")), "{args:?}: {err}");
    }
}

#[test]
fn missing_model_file() {
    let err = fails(NOT_FOUND, &["explain", "--model", "/nonexistent/model.json", "--input", "x.parquet", "--output", "y.parquet"]);
    assert!(err.contains("/nonexistent/model.json"), "{err}");
}

/// The files that once made the Parquet and Arrow IPC readers allocate gigabytes, spin or panic
/// (`fuzz/regressions/input_rows/`): each a bad-data error naming it, and, where the reader
/// panicked before the error, no panic message on stderr (the panic is expected and caught).
#[test]
fn corrupt_input_files_fail_cleanly_without_a_panic_message() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (model, dir) = (root.join("examples/models/fraud.json"), tmp());
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(root.join("fuzz/regressions/input_rows")).unwrap().map(|e| e.unwrap().path()).collect();
    inputs.sort();
    assert!(inputs.iter().any(|p| p.ends_with("arrow_schema_unknown_float_precision.parquet")), "{inputs:?}");
    for input in &inputs {
        // `failed` refuses a "panicked" on stderr.
        let e = explain_fails(BAD_DATA, &model, input, &dir.path().join("out.parquet"), &[]);
        assert!(e.contains(input.file_name().unwrap().to_str().unwrap()), "{e}");
    }
}

#[test]
fn truncated_and_corrupt_models() {
    let dir = tmp();
    let json = std::fs::read(common::fixtures_dir().join("xgb_regression/model.json")).unwrap();
    let ubj = std::fs::read(common::fixtures_dir().join("xgb_binary_ubj/model.ubj")).unwrap();
    let lgb = std::fs::read_to_string(common::fixtures_dir().join("lgb_regression/model.txt")).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("trunc.json", json[..json.len() / 2].to_vec(), "truncated"),
        ("garbage.json", b"{\"learner\": 12}".to_vec(), "learner_model_param"),
        ("trunc.ubj", ubj[..ubj.len() / 3].to_vec(), "truncated"),
        ("trunc.txt", lgb.as_bytes()[..lgb.len() / 2].to_vec(), "truncated"),
        ("empty.json", vec![], "empty"),
        (
            "noise.bin",
            b"\x00\x01\x02garbage".to_vec(),
            "none of the formats read here: XGBoost JSON (.json), XGBoost UBJSON (.ubj), LightGBM text (.txt)",
        ),
    ];
    let input = common::fixtures_dir().join("xgb_regression/input.parquet");
    for (name, bytes, needle) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = explain_fails(BAD_DATA, &path, &input, &dir.path().join("o.parquet"), &[]);
        assert!(err.contains(name) && err.contains(needle), "{name}: {err}");
        let err = fails(BAD_DATA, &["models", "inspect", path.to_str().unwrap()]);
        assert!(err.contains(needle), "{name}: {err}");
    }
}

#[test]
fn lightgbm_linear_trees_load_and_are_explained_over_a_background() {
    let f = common::linear_fixtures().into_iter().next().unwrap();
    let inspect = run(&["models", "inspect", f.model_path.to_str().unwrap()]);
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    let linear_leaves: usize = f.model.trees().iter().map(|t| t.linear_leaves.len()).sum();
    assert!(String::from_utf8_lossy(&inspect.stdout).contains(&format!("linear leaves:  {linear_leaves} (")), "{inspect:?}");
    let dir = tmp();
    let out = dir.path().join("o.parquet");
    // Path-dependent values need what the file does not hold: refused, pointing at a background.
    let err = explain_fails(NOT_SUPPORTED, &f.model_path, &f.input_path(), &out, &[]);
    assert!(err.contains("linear_tree") && err.contains("background"), "{err}");
    assert!(!out.exists());
    let background = f.dir.join("background.parquet");
    let run = explain(&f.model_path, &f.input_path(), &out, &["--background", background.to_str().unwrap()]);
    assert!(run.status.success(), "{}", stderr(&run));
    let explainer = shapfusion::Explainer::builder(f.model.clone()).background(read_parquet(&background)).build().unwrap();
    assert_eq!(read_parquet(&out).columns(), explainer.explain_batch(&f.batch).unwrap().columns());
}

#[test]
fn child_index_out_of_range_names_tree_and_node() {
    let dir = tmp();
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(common::fixtures_dir().join("xgb_regression/model.json")).unwrap()).unwrap();
    v["learner"]["gradient_booster"]["model"]["trees"][3]["left_children"][2] = serde_json::json!(999);
    let path = dir.path().join("bad_child.json");
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = fails(BAD_DATA, &["models", "inspect", path.to_str().unwrap()]);
    assert!(err.contains("tree 3") && err.contains("node 2") && err.contains("999"), "{err}");

    // A cycle: a child pointing back at the root.
    v["learner"]["gradient_booster"]["model"]["trees"][3]["left_children"][2] = serde_json::json!(0);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = fails(BAD_DATA, &["models", "inspect", path.to_str().unwrap()]);
    assert!(err.contains("tree 3") && err.contains("cycle"), "{err}");
}

#[test]
fn input_missing_a_feature_column_names_it() {
    let f = fixture("xgb_regression");
    let dir = tmp();
    let input = dir.path().join("in.parquet");
    write_parquet(&input, &f.batch.project(&[0, 1, 2, 4, 5, 6, 7, 8, 9]).unwrap());
    let err = explain_fails(BAD_DATA, &f.model_path, &input, &dir.path().join("o.parquet"), &[]);
    assert!(err.contains("\"f3\""), "{err}");
}

#[test]
fn string_column_is_refused_by_name() {
    let f = fixture("lgb_regression");
    let dir = tmp();
    let batch = common::with_column(&f.batch, "x2", Arc::new(StringArray::from(vec!["a"; f.batch.num_rows()])));
    let input = dir.path().join("in.parquet");
    write_parquet(&input, &batch);
    let err = explain_fails(BAD_DATA, &f.model_path, &input, &dir.path().join("o.parquet"), &[]);
    assert!(err.contains("\"x2\"") && err.contains("Utf8"), "{err}");
}

#[test]
fn integer_columns_and_nulls_are_accepted() {
    let f = fixture("lgb_regression");
    let dir = tmp();
    // Integer-typed feature columns (values truncated) with a null: same as the float input.
    let n = f.batch.num_rows();
    let mut cols: Vec<Arc<dyn Array>> = Vec::new();
    let mut floats: Vec<Arc<dyn Array>> = Vec::new();
    for c in 0..f.batch.num_columns() {
        let col = f.batch.column(c).as_primitive::<Float64Type>();
        let ints: Vec<Option<i64>> = (0..n).map(|r| if r == 0 { None } else { Some((col.value(r) * 1000.0) as i64) }).collect();
        floats.push(Arc::new(Float64Array::from(ints.iter().map(|v| v.map(|x| x as f64)).collect::<Vec<_>>())));
        cols.push(Arc::new(Int64Array::from(ints)));
    }
    let (int_in, float_in) = (dir.path().join("i.parquet"), dir.path().join("f.parquet"));
    let int_fields: Vec<Field> = f.batch.schema().fields().iter().map(|x| Field::new(x.name(), DataType::Int64, true)).collect();
    write_parquet(&int_in, &RecordBatch::try_new(Arc::new(Schema::new(int_fields)), cols).unwrap());
    write_parquet(&float_in, &RecordBatch::try_new(f.batch.schema(), floats).unwrap());
    let (a, b) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
    assert!(explain(&f.model_path, &int_in, &a, &[]).status.success());
    assert!(explain(&f.model_path, &float_in, &b, &[]).status.success());
    assert_eq!(read_parquet(&a), read_parquet(&b));
}

#[test]
fn unknown_algorithm_and_bad_keep() {
    let f = fixture("xgb_regression");
    let o = run(&["explain", "--model", f.model_path.to_str().unwrap(), "--input", "x", "--output", "y", "--algorithm", "magic"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("fast-v2"), "{}", stderr(&o));
    let dir = tmp();
    let err = explain_fails(INVALID_ARGUMENT, &f.model_path, &f.input_path(), &dir.path().join("o.parquet"), &["--keep", "nope"]);
    assert!(err.contains("nope"), "{err}");
}

/// A CatBoost `.cbm` with CTRs of feature combinations: `explain` writes CatBoost's own values,
/// `models inspect` lists the combinations, and an engine that does not take them is refused by
/// name with the exit status of what is not built yet.
#[test]
fn catboost_combinations_explain_as_catboost_and_inspect_lists_them() {
    let f = common::combination_fixtures().into_iter().next().expect("a fixture under tests/fixtures/combinations");
    let cbm = f.dir.join("model.cbm");
    let dir = tmp();
    let out = dir.path().join("o.parquet");
    let o = explain(&cbm, &f.input_path(), &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("with oblivious"), "{}", stderr(&o));
    common::assert_library_values(&f, &common::row_major(read_parquet(&out).columns(), 1), 1e-12, "explain");
    // Over a background file: CatBoost's Independent Tree SHAP. The background's categorical
    // columns hold categories, which reach the engines as an input's do (read as codes, a
    // category and each combination holding it would be another one).
    let background = f.background().unwrap();
    let o = explain(&cbm, &f.input_path(), &out, &["--background", background.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = common::row_major(read_parquet(&out).columns(), 1);
    let (err, row) = common::max_row_rel_error(&got, &f.expected_f64("background_contribs").unwrap(), f.model.num_features() + 1);
    assert!(err <= 1e-12, "explain --background: {err:.3e} from CatBoost's at row {row}");
    let o = run(&["models", "inspect", cbm.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains("feature combinations (") && text.contains("\"city\""), "{text}");
    let err = explain_fails(NOT_SUPPORTED, &cbm, &f.input_path(), &dir.path().join("l.parquet"), &["--algorithm", "linear"]);
    assert!(err.contains("CTRs of feature combinations") && err.contains("not built yet"), "{err}");
}

#[test]
fn models_inspect_describes_the_model() {
    let f = fixture("xgb_categorical");
    let o = run(&["models", "inspect", "--json", f.model_path.to_str().unwrap()]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["trees"], 15);
    assert_eq!(v["output_groups"], 1);
    assert_eq!(v["categorical"], serde_json::json!(["c1", "c3"]));
    assert_eq!(v["format"], "XGBoost JSON");
}

#[test]
fn device_gpu_without_a_usable_gpu_names_what_is_missing_and_auto_uses_the_cpu() {
    #[cfg(feature = "gpu")]
    let missing = match shapfusion::gpu::probe() {
        Ok(_) => return, // a GPU host: tests/gpu_paths.rs checks the GPU's numbers
        Err(why) => why,
    };
    #[cfg(not(feature = "gpu"))]
    let missing = "no GPU support".to_string();
    let f = fixture("xgb_regression");
    let dir = tmp();
    let out = dir.path().join("out.parquet");
    let err = explain_fails(NOT_SUPPORTED, &f.model_path, &f.input_path(), &out, &["--device", "gpu"]);
    assert!(err.contains("device gpu was asked for") && err.contains(&missing), "{err}");
    assert!(!out.exists(), "nothing is written when the device is refused");

    let o = bin()
        .args([
            "explain",
            "--model",
            f.model_path.to_str().unwrap(),
            "--input",
            f.input_path().to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--device",
            "auto",
        ])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("computing on the CPU"), "auto says where it computes: {}", stderr(&o));
    assert_eq!(read_parquet(&out).num_rows(), f.batch.num_rows());
}

#[test]
fn explain_refuses_to_write_over_its_input() {
    let dir = tmp();
    let input = dir.path().join("rows.csv");
    std::fs::write(&input, "amount,age,account_days,hour,tx_24h,merchant_risk,country_code,card_present\n1,2,3,4,5,6,7,1\n").unwrap();
    let before = std::fs::read(&input).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/fraud.json");
    // The same file under another spelling.
    let same = dir.path().join(".").join("rows.csv");
    let e = fails(
        INVALID_ARGUMENT,
        &["explain", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "--output", same.to_str().unwrap()],
    );
    assert!(e.contains("would destroy the input"), "{e}");
    assert_eq!(std::fs::read(&input).unwrap(), before, "the input is untouched");
}

#[test]
fn a_killed_explain_leaves_the_previous_output_intact() {
    let dir = tmp();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (model, input) = (root.join("examples/models/fraud.json"), root.join("examples/data/payments.parquet"));
    let output = dir.path().join("shap.parquet");
    let o = explain(&model, &input, &output, &["--margin"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let previous = std::fs::read(&output).unwrap();

    // A slow run (the reference engine's interactions, one thread, tiny batches), killed once it
    // has started writing.
    let mut child = bin()
        .args(["explain", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "--output", output.to_str().unwrap()])
        .args(["--interactions", "--algorithm", "treeshap", "--threads", "1", "--batch-rows", "16", "--no-progress"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let partial = || std::fs::read_dir(dir.path()).unwrap().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".partial"));
    let started = std::time::Instant::now();
    while !partial() {
        assert!(child.try_wait().unwrap().is_none(), "explain ended before it could be killed");
        assert!(started.elapsed().as_secs() < 60, "no partial output appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "explain ended before it could be killed");
    child.kill().unwrap();
    child.wait().unwrap();

    assert_eq!(std::fs::read(&output).unwrap(), previous, "the previous output is intact");
    let names: Vec<String> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| n == "shap.parquet" || (n.starts_with(".shap.parquet.") && n.ends_with(".partial"))), "{names:?}");
}

/// `RESET shap.<name>` in the shell returns the option to what the command line set (the model
/// directory) or to its default (the background: path-dependent values again), and a name that
/// is not an option fails naming the options. DataFusion's own `RESET` refuses every option
/// outside `datafusion.*`.
#[cfg(feature = "sql")]
#[test]
fn reset_in_the_sql_shell_returns_shap_options_to_where_the_session_started() {
    let dir = tmp();
    let f = fixture("xgb_missing");
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    std::fs::copy(&f.model_path, models.join("m.json")).unwrap();
    let background = format!("recent={}", f.background().unwrap().display());
    let query = format!("SELECT shap('m', {}) AS s FROM '{}'", common::sql::feature_list(&f), f.input_path().display());
    let sql = |statements: &[&str], out: &Path| {
        let mut args = vec!["sql", "-q", "--model-dir", models.to_str().unwrap(), "--background", &background];
        args.extend(["--format", "parquet", "--output", out.to_str().unwrap()]);
        for s in statements {
            args.extend(["-c", s]);
        }
        run(&args)
    };
    let path_dependent = dir.path().join("path_dependent.parquet");
    let o = explain(&f.model_path, &f.input_path(), &path_dependent, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let path_dependent = read_parquet(&path_dependent);

    let set = ["SET shap.background = 'recent'", "SET shap.model_dir = '/nowhere'"];
    let over_background = dir.path().join("over_background.parquet");
    let o = sql(&[set[0], &query], &over_background);
    assert!(o.status.success(), "{}", stderr(&o));
    let values = |path: &Path| read_parquet(path).column(0).as_struct().columns().to_vec();
    assert_ne!(values(&over_background), path_dependent.columns(), "the background takes effect");

    let reset = dir.path().join("reset.parquet");
    let o = sql(&[set[0], set[1], "RESET shap.background", "RESET shap.model_dir", &query], &reset);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = values(&reset);
    for (i, column) in path_dependent.columns().iter().enumerate() {
        assert!(common::sql::same_bits(got[i].as_ref(), column.as_ref()), "column {i} differs from path-dependent explain after RESET");
    }

    let o = sql(&["RESET shap.backgrounds", &query], &dir.path().join("x.parquet"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("RESET shap.backgrounds: no such option") && e.contains("shap.index, shap.background"), "{e}");
}

#[cfg(feature = "sql")]
#[test]
fn lightgbm_integer_coded_categories_through_explain_and_sql() {
    let dir = tmp();
    for name in common::LIGHTGBM_INTEGER_CODED {
        let f = fixture(name);
        let model = f.model_path.to_str().unwrap();
        let out = dir.path().join(format!("{name}.parquet"));
        let o = explain(&f.model_path, &f.input_path(), &out, &[]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        common::assert_library_values(&f, &common::row_major(read_parquet(&out).columns(), 1), 1e-6, "explain");

        let query = format!("SELECT shap('m', {}) AS s FROM '{}'", common::sql::feature_list(&f), f.input_path().display());
        let sql_out = dir.path().join(format!("{name}_sql.parquet"));
        let o = run(&["sql", "-q", "--model", &format!("m={model}"), "--format", "parquet", "--output", sql_out.to_str().unwrap(), "-c", &query]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let s = read_parquet(&sql_out);
        common::assert_library_values(&f, &common::row_major(s.column(0).as_struct().columns(), 1), 1e-6, "shapfusion sql");
    }
    // Such a model stores no names, so strings for a categorical feature are refused, saying why.
    let f = fixture("lgb_int_categories_pandas");
    let shops: StringArray = (0..f.batch.num_rows()).map(|i| Some(format!("shop{}", i % 3))).collect();
    let input = dir.path().join("strings.parquet");
    write_parquet(&input, &common::with_column(&f.batch, "store", Arc::new(shops)));
    let err = explain_fails(BAD_DATA, &f.model_path, &input, &dir.path().join("x.parquet"), &[]);
    assert!(err.contains("\"store\"") && err.contains("stores no category names") && err.contains("codes"), "{err}");
}
