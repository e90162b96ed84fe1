//! Categorical values by name: string and dictionary columns mapped through the categories the
//! model file stores, with each library's rule for a category not seen in training. (The
//! fixtures `*_named_categories*` check the numbers against the libraries in every front end;
//! these tests check the rules around them.)

mod common;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, DictionaryArray, Float64Array, Int8Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Float64Type, Int8Type};
use common::{fixtures, with_column, Fixture};
use shapfusion::model::{Categories, UnseenCategory};
use shapfusion::Explainer;

fn fixture(name: &str) -> Fixture {
    fixtures().into_iter().find(|f| f.name == name).unwrap()
}

fn shap(f: &Fixture, batch: &RecordBatch) -> Vec<u64> {
    let out = Explainer::builder(f.model.clone()).threads(1).build().unwrap().explain_batch(batch).unwrap();
    out.columns().iter().flat_map(|c| c.as_primitive::<Float64Type>().values().iter().map(|v| v.to_bits()).collect::<Vec<_>>()).collect()
}

/// The stored names of a feature.
fn names(f: &Fixture, feature: &str) -> Vec<String> {
    let j = f.model.feature_names().iter().position(|n| n == feature).unwrap();
    match &f.model.categories()[j] {
        Some(Categories::Names(n)) => n.clone(),
        other => panic!("{}: {feature} has no stored names: {other:?}", f.name),
    }
}

#[test]
fn both_libraries_store_the_training_categories_in_their_order() {
    for name in ["xgb_named_categories", "xgb_named_categories_ubj", "lgb_named_categories"] {
        let f = fixture(name);
        // Training order, not sorted: the code of a name is its position here.
        assert_eq!(names(&f, "country"), ["US", "FR", "DE", "JP", "BR"], "{name}");
        assert_eq!(names(&f, "channel"), ["web", "store", "app"], "{name}");
        let tier = f.model.feature_names().iter().position(|n| n == "tier").unwrap();
        assert_eq!(f.model.categories()[tier], Some(Categories::Numbers(vec![10.0, 20.0, 35.0])), "{name}");
        assert!(f.model.categories()[0].is_none(), "{name}: amount is numeric");
    }
    assert_eq!(fixture("xgb_named_categories").model.unseen_category(), UnseenCategory::Error);
    assert_eq!(fixture("lgb_named_categories").model.unseen_category(), UnseenCategory::Missing);
    // Models trained on codes store no names.
    assert!(fixture("xgb_categorical").model.categories().iter().all(Option::is_none));
    assert!(fixture("lgb_categorical").model.categories().iter().all(Option::is_none));
}

#[test]
fn names_and_codes_give_the_same_bits() {
    for name in ["xgb_named_categories", "lgb_named_categories"] {
        let f = fixture(name);
        let mut coded = f.batch.clone();
        for feature in ["country", "channel"] {
            let stored = names(&f, feature);
            let column = arrow::compute::cast(f.batch.column_by_name(feature).unwrap(), &DataType::Utf8).unwrap();
            // Codes as floats: position in the stored list; null (and LightGBM's unseen) missing.
            let codes: Float64Array =
                column.as_string::<i32>().iter().map(|v| v.and_then(|v| stored.iter().position(|s| s == v)).map(|k| k as f64)).collect();
            coded = with_column(&coded, feature, Arc::new(codes));
        }
        assert_eq!(shap(&f, &f.batch), shap(&f, &coded), "{name}");
    }
}

#[test]
fn dictionary_and_view_columns_of_names_are_read_alike() {
    let f = fixture("xgb_named_categories");
    let country = f.batch.column_by_name("country").unwrap().clone();
    let keys: Int8Array = (0..country.len() as i8).map(Some).collect();
    let dictionary: ArrayRef = Arc::new(DictionaryArray::<Int8Type>::try_new(keys, country.clone()).unwrap());
    let view = arrow::compute::cast(&country, &DataType::Utf8View).unwrap();
    let want = shap(&f, &f.batch);
    assert_eq!(shap(&f, &with_column(&f.batch, "country", dictionary)), want);
    assert_eq!(shap(&f, &with_column(&f.batch, "country", view)), want);
}

#[test]
fn xgboost_refuses_an_unseen_category_and_lightgbm_reads_it_as_missing() {
    let f = fixture("xgb_named_categories");
    let mut values: Vec<Option<&str>> = vec![Some("US"); f.batch.num_rows()];
    values[3] = Some("XX");
    let batch = with_column(&f.batch, "country", Arc::new(StringArray::from(values.clone())));
    let e = f.model.feature_block(&batch).unwrap_err().to_string();
    assert!(e.contains("\"country\"") && e.contains("\"XX\"") && e.contains("not seen in training") && e.contains("US, FR, DE, JP, BR"), "{e}");

    let f = fixture("lgb_named_categories");
    let unseen = with_column(&f.batch, "country", Arc::new(StringArray::from(values.clone())));
    values[3] = None;
    let missing = with_column(&f.batch, "country", Arc::new(StringArray::from(values)));
    assert_eq!(shap(&f, &unseen), shap(&f, &missing));
}

#[test]
fn names_for_a_model_trained_on_codes_are_refused_with_what_to_do() {
    let f = fixture("xgb_categorical");
    let names: StringArray = (0..f.batch.num_rows()).map(|i| Some(format!("c{i}"))).collect();
    let e = f.model.feature_block(&with_column(&f.batch, "c1", Arc::new(names))).unwrap_err().to_string();
    assert!(e.contains("\"c1\"") && e.contains("stores no category names") && e.contains("codes"), "{e}");
    // And strings for a numeric feature are a type error naming the column.
    let text: StringArray = (0..f.batch.num_rows()).map(|_| Some("1.5")).collect();
    let e = f.model.feature_block(&with_column(&f.batch, "x0", Arc::new(text))).unwrap_err().to_string();
    assert!(e.contains("\"x0\"") && e.contains("Utf8"), "{e}");
}

#[test]
fn a_dictionary_of_numeric_categories_maps_values_not_codes() {
    // `tier` was a pandas categorical of 10/20/35: a dictionary column holds those values.
    let f = fixture("lgb_named_categories");
    let codes = f.batch.column_by_name("tier").unwrap().as_primitive::<Int8Type>().clone();
    let values = Float64Array::from(vec![10.0, 20.0, 35.0]);
    let dictionary: ArrayRef = Arc::new(DictionaryArray::<Int8Type>::try_new(codes, Arc::new(values)).unwrap());
    assert_eq!(shap(&f, &with_column(&f.batch, "tier", dictionary)), shap(&f, &f.batch));
}

#[test]
fn a_json_model_and_its_ubjson_twin_give_the_same_bits() {
    // The fixture script trains the same model twice (same data, seed and threads) and saves it
    // as JSON and as UBJSON. JSON prints XGBoost's float32 leaves and covers as short decimals;
    // read back as float32 they are the UBJSON's raw values, bit for bit.
    let (json, ubj) = (fixture("xgb_named_categories"), fixture("xgb_named_categories_ubj"));
    assert_eq!(json.model.trees().len(), ubj.model.trees().len());
    assert_eq!(shap(&json, &json.batch), shap(&ubj, &json.batch));
}

#[test]
fn lightgbm_models_trained_on_integer_codes_load_and_take_codes() {
    use shapfusion::model::FeatureKind;
    for name in common::LIGHTGBM_INTEGER_CODED {
        let f = fixture(name);
        // `pandas_categorical` null, [] or lists that cannot be matched one to one: no names.
        assert!(f.model.categories().iter().all(Option::is_none), "{name}");
        let categorical: Vec<&str> = f
            .model
            .feature_names()
            .iter()
            .zip(f.model.feature_kinds())
            .filter(|(_, k)| **k == FeatureKind::Categorical)
            .map(|(n, _)| n.as_str())
            .collect();
        // An ordered pandas category is split as a number: LightGBM marks it numeric.
        let want: &[&str] = if name == "lgb_ordered_category" { &[] } else { &["store", "region"] };
        assert_eq!(categorical, want, "{name}");
        let out = Explainer::builder(f.model.clone()).build().unwrap().explain_batch(&f.batch).unwrap();
        common::assert_library_values(&f, &common::row_major(out.columns(), 1), 1e-6, "Explainer");
    }
    // Strings for such a feature: the model has no names to map them with.
    let f = fixture("lgb_int_categories_numpy");
    let names: StringArray = (0..f.batch.num_rows()).map(|i| Some(format!("r{}", i % 4))).collect();
    let e = f.model.feature_block(&with_column(&f.batch, "region", Arc::new(names))).unwrap_err().to_string();
    assert!(e.contains("\"region\"") && e.contains("stores no category names") && e.contains("codes"), "{e}");
}

#[test]
fn pandas_categorical_lines_lightgbm_ignores_do_not_stop_a_model_loading() {
    use shapfusion::model::{FeatureKind, Model, ModelFormat};
    let f = fixture("lgb_named_categories");
    let text = std::fs::read_to_string(&f.model_path).unwrap();
    let line = text.lines().find(|l| l.starts_with("pandas_categorical:")).unwrap();
    let load = |replacement: &str| Model::from_bytes_as(text.replace(line, replacement).as_bytes(), "edited.txt", ModelFormat::LightgbmText);
    // No names stored, or names that cannot be matched to the categorical features: codes only.
    for replacement in ["pandas_categorical:[]", "pandas_categorical:null", "pandas_categorical:[[\"a\", \"b\"]]"] {
        let model = load(replacement).unwrap_or_else(|e| panic!("{replacement}: {e}"));
        assert!(model.categories().iter().all(Option::is_none), "{replacement}");
        // Still categorical (from feature_infos), and the same trees.
        assert_eq!(model.feature_kinds(), f.model.feature_kinds(), "{replacement}");
        assert_eq!(model.trees().len(), f.model.trees().len(), "{replacement}");
    }
    assert_eq!(f.model.feature_kinds().iter().filter(|k| **k == FeatureKind::Categorical).count(), 3);
    // What LightGBM's Python package cannot read either is still an error naming the line.
    let e = load("pandas_categorical:[[\"a\"").unwrap_err().to_string();
    assert!(e.contains("edited.txt") && e.contains("pandas_categorical is not a JSON list of lists"), "{e}");
}
