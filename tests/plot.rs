//! `shapfusion plot` and `shapfusion::plot`: every chart renders for single- and multi-output
//! models at the size asked for, lists features in the order the numbers give, reads an
//! explain output back to the same picture as computing it, and refuses bad requests clearly.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::fixtures;
use shapfusion::input::RowSelection;
use shapfusion::plot::{render, render_to_file, ChartKind, ChartOptions, ImageFormat, PlotData};
use shapfusion::{Explainer, Model};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shapfusion")).args(args).env("RUST_LOG", "warn").output().expect("runs")
}

fn all_rows() -> RowSelection {
    RowSelection::Sample { max_rows: None, seed: 0 }
}

fn fixture_data(name: &str) -> PlotData {
    let f = fixtures().into_iter().find(|f| f.name == name).unwrap();
    PlotData::from_model(Explainer::builder(f.model.clone()), &f.input_path(), all_rows()).unwrap()
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

/// Width and height attributes of an SVG's root element.
fn svg_size(svg: &str) -> (u32, u32) {
    let root = &svg[svg.find("<svg").unwrap()..];
    let root = &root[..root.find('>').unwrap()];
    let attr = |name: &str| -> u32 {
        let at = root.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        root[at..].split('"').next().unwrap().parse().unwrap()
    };
    (attr("width"), attr("height"))
}

/// (y, text) of every `<text>` element of an SVG.
fn svg_texts(svg: &str) -> Vec<(f64, String)> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text") {
        rest = &rest[start..];
        let open_end = rest.find('>').unwrap();
        let tag = &rest[..open_end];
        let close = rest.find("</text>").unwrap();
        let y_at = tag.find(" y=\"").unwrap() + 4;
        let y: f64 = tag[y_at..].split('"').next().unwrap().parse().unwrap();
        out.push((y, rest[open_end + 1..close].trim().to_string()));
        rest = &rest[close..];
    }
    out
}

/// The features in the order their names appear down an SVG (top first).
fn features_top_down(svg: &str, features: &[String]) -> Vec<String> {
    let mut found: Vec<(f64, String)> = svg_texts(svg).into_iter().filter(|(_, t)| features.contains(t)).collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    found.into_iter().map(|(_, t)| t).collect()
}

/// Features by mean |φ| of `group`, largest first, computed here from the data.
fn by_importance(data: &PlotData, group: usize) -> Vec<String> {
    let mut scored: Vec<(f64, usize)> =
        (0..data.features.len()).map(|j| ((0..data.rows).map(|r| data.shap(r, group, j).abs()).sum::<f64>() / data.rows as f64, j)).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, j)| data.features[j].clone()).collect()
}

fn svg(data: &PlotData, options: &ChartOptions) -> String {
    String::from_utf8(render(data, options, ImageFormat::Svg).unwrap()).unwrap()
}

fn kinds(feature: &str) -> Vec<ChartKind> {
    vec![ChartKind::Summary, ChartKind::Bar, ChartKind::Dependence { feature: feature.into(), color: None }, ChartKind::Waterfall { row: 3 }]
}

#[test]
fn every_chart_renders_for_single_and_multi_output_models_at_the_expected_size() {
    for (name, class) in [("xgb_regression", None), ("xgb_multiclass", Some(2)), ("xgb_vector_leaf", Some(1)), ("lgb_named_categories", None)] {
        let data = fixture_data(name);
        assert_eq!(data.groups > 1, class.is_some(), "{name}");
        let feature = data.features[0].clone();
        for kind in kinds(&feature) {
            let mut options = ChartOptions::new(kind.clone());
            options.class = class;
            options.top = 8;
            // Default size: 900 wide; rows of features (plus the "other features" bar of a
            // waterfall), or 600 for a dependence chart.
            let shown = data.features.len().min(8);
            let height = match kind {
                ChartKind::Dependence { .. } => 600,
                ChartKind::Waterfall { .. } => 130 + 30 * (shown + usize::from(shown < data.features.len())) as u32,
                _ => 130 + 30 * shown as u32,
            };
            let png = render(&data, &options, ImageFormat::Png).unwrap_or_else(|e| panic!("{name} {}: {e}", kind.name()));
            assert_eq!(png_size(&png), (900, height), "{name} {}", kind.name());
            assert_eq!(svg_size(&svg(&data, &options)), (900, height), "{name} {}", kind.name());
            // A chosen size is kept exactly.
            options.width = Some(640);
            options.height = Some(480);
            assert_eq!(png_size(&render(&data, &options, ImageFormat::Png).unwrap()), (640, 480));
        }
    }
}

#[test]
fn a_multiclass_bar_chart_stacks_every_class_without_class() {
    let data = fixture_data("xgb_multiclass");
    let chart = svg(&data, &ChartOptions::new(ChartKind::Bar));
    let texts: Vec<String> = svg_texts(&chart).into_iter().map(|(_, t)| t).collect();
    for k in 0..data.groups {
        assert!(texts.contains(&format!("class {k}")), "no legend entry for class {k}");
    }
    // Order: mean |φ| summed over the classes.
    let mut total: Vec<(f64, usize)> = (0..data.features.len())
        .map(|j| ((0..data.rows).flat_map(|r| (0..data.groups).map(move |g| (r, g))).map(|(r, g)| data.shap(r, g, j).abs()).sum::<f64>(), j))
        .collect();
    total.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let want: Vec<String> = total.iter().take(20).map(|&(_, j)| data.features[j].clone()).collect();
    assert_eq!(features_top_down(&chart, &data.features), want);
}

#[test]
fn summary_and_bar_list_features_by_mean_abs_shap_top_down() {
    for (name, class) in [("xgb_regression", 0), ("xgb_multiclass", 1)] {
        let data = fixture_data(name);
        let want = by_importance(&data, class);
        for kind in [ChartKind::Summary, ChartKind::Bar] {
            let mut options = ChartOptions::new(kind.clone());
            options.class = (data.groups > 1).then_some(class);
            assert_eq!(features_top_down(&svg(&data, &options), &data.features), want, "{name} {}", kind.name());
            options.top = 5;
            assert_eq!(features_top_down(&svg(&data, &options), &data.features), want[..5], "{name} {} --top 5", kind.name());
        }
    }
}

#[test]
fn a_waterfall_goes_from_the_bias_to_the_margin_largest_contribution_on_top() {
    let data = fixture_data("xgb_regression");
    let row = 7;
    let mut options = ChartOptions::new(ChartKind::Waterfall { row });
    options.top = 4;
    let chart = svg(&data, &options);
    let f = data.features.len();
    let mut by_size: Vec<usize> = (0..f).collect();
    by_size.sort_by(|&a, &b| data.shap(row, 0, b).abs().total_cmp(&data.shap(row, 0, a).abs()));
    let labels: Vec<String> = by_size[..4].iter().map(|&j| format!("{} = {}", data.features[j], data.value_text(row, j))).collect();
    let mut shown: Vec<(f64, String)> = svg_texts(&chart).into_iter().filter(|(_, t)| labels.contains(t) || t.ends_with("other features")).collect();
    shown.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut want = labels.clone();
    want.push(format!("{} other features", f - 4));
    assert_eq!(shown.into_iter().map(|(_, t)| t).collect::<Vec<_>>(), want);
    // The axis says where it starts and ends: bias + SHAP values = margin.
    let bias = data.shap(row, 0, f);
    let margin: f64 = (0..=f).map(|j| data.shap(row, 0, j)).sum();
    let xgboost_margin = fixtures().into_iter().find(|x| x.name == "xgb_regression").unwrap().expected_f64("margin").unwrap()[row];
    assert!((margin - xgboost_margin).abs() < 1e-5 * xgboost_margin.abs().max(1.0), "{margin} vs XGBoost's {xgboost_margin}");
    let fmt = |v: f64| shapfusion_number(v);
    assert!(svg_texts(&chart).iter().any(|(_, t)| t.contains(&format!("bias {} + SHAP values = {}", fmt(bias), fmt(margin)))), "axis title");
}

/// The charts' number format (4 significant digits, no trailing zeros), restated here.
fn shapfusion_number(v: f64) -> String {
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (3 - magnitude).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[test]
fn an_explain_output_and_its_input_draw_the_chart_the_model_draws() {
    let dir = tempfile::tempdir().unwrap();
    let (model, input) = ("examples/models/fraud.json", "examples/data/payments.parquet");
    let shap = dir.path().join("shap.parquet");
    let o = run(&["explain", "--model", model, "--input", input, "--output", shap.to_str().unwrap(), "--keep", "id", "--no-progress"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for kind in ["summary", "bar", "dependence", "waterfall"] {
        let from_file = dir.path().join(format!("{kind}-file.svg"));
        let from_model = dir.path().join(format!("{kind}-model.svg"));
        let extra: &[&str] = match kind {
            "dependence" => &["--feature", "amount"],
            "waterfall" => &["--row", "123"],
            _ => &[],
        };
        for (source, out) in [(["--shap", shap.to_str().unwrap()], &from_file), (["--model", model], &from_model)] {
            let mut args =
                vec!["plot", kind, source[0], source[1], "--input", input, "--output", out.to_str().unwrap(), "--max-rows", "500", "--seed", "9"];
            args.extend_from_slice(extra);
            let o = run(&args);
            assert!(o.status.success(), "{kind}: {}", String::from_utf8_lossy(&o.stderr));
        }
        let a = std::fs::read_to_string(&from_file).unwrap();
        assert_eq!(a, std::fs::read_to_string(&from_model).unwrap(), "{kind}: the explain output draws another chart");
        // The kept `id` column is not a feature.
        assert!(!svg_texts(&a).iter().any(|(_, t)| t == "id"), "{kind}: id drawn as a feature");
    }
    // PNG by the extension, the 500 sampled rows in the title.
    let png = dir.path().join("summary.png");
    let o = run(&["plot", "summary", "--shap", shap.to_str().unwrap(), "--input", input, "-o", png.to_str().unwrap(), "--max-rows", "500"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(png_size(&std::fs::read(&png).unwrap()).0, 900);
    assert!(String::from_utf8_lossy(&o.stderr).contains("summary chart of 500 rows"));
}

#[test]
fn sampling_is_seeded_and_bounded() {
    let (model, input) = (Path::new("examples/models/fraud.json"), Path::new("examples/data/payments.parquet"));
    let model = Model::load(model).unwrap();
    let pick = |seed| PlotData::from_model(Explainer::builder(model.clone()), input, RowSelection::Sample { max_rows: Some(100), seed }).unwrap();
    let (a, b, c) = (pick(1), pick(1), pick(2));
    assert_eq!(a.rows, 100);
    // The same rows, values and attributions (compared as bits: missing values are NaN).
    let bits = |d: &PlotData| (d.row_numbers.clone(), d.values.iter().chain(&d.shap).map(|v| v.to_bits()).collect::<Vec<_>>());
    assert_eq!(bits(&a), bits(&b));
    assert_ne!(a.row_numbers, c.row_numbers);
    assert!(a.row_numbers.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn bad_requests_get_clear_errors() {
    let data = fixture_data("xgb_regression");
    let err = |options: ChartOptions| render(&data, &options, ImageFormat::Svg).unwrap_err().to_string();
    let e = err(ChartOptions::new(ChartKind::Dependence { feature: "nope".into(), color: None }));
    assert!(e.contains("\"nope\" is not in the model") && e.contains(&data.features[0]), "{e}");
    let e = err(ChartOptions::new(ChartKind::Dependence { feature: data.features[0].clone(), color: Some("zz".into()) }));
    assert!(e.contains("\"zz\""), "{e}");
    let e = err(ChartOptions::new(ChartKind::Waterfall { row: data.rows }));
    assert!(e.contains(&format!("row {} is out of range", data.rows)), "{e}");
    let mut with_class = ChartOptions::new(ChartKind::Summary);
    with_class.class = Some(1);
    assert!(err(with_class).contains("class 1 is out of range: the model has 1 output"));

    let multi = fixture_data("xgb_multiclass");
    let e = render(&multi, &ChartOptions::new(ChartKind::Summary), ImageFormat::Svg).unwrap_err().to_string();
    assert!(e.contains("3 outputs") && e.contains("pick the class"), "{e}");
    let e = render_to_file(&data, &ChartOptions::new(ChartKind::Bar), Path::new("chart.jpg")).unwrap_err().to_string();
    assert!(e.contains(".png or .svg"), "{e}");

    // From the command line: a row past the input's end, and a SHAP file of other rows.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.svg");
    let f = fixtures().into_iter().find(|f| f.name == "xgb_regression").unwrap();
    let o = run(&[
        "plot",
        "waterfall",
        "--model",
        f.model_path.to_str().unwrap(),
        "--input",
        f.input_path().to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--row",
        "1000",
    ]);
    let msg = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(64), "an invalid argument: {msg}");
    assert!(msg.contains("row 1000 is out of range") && msg.contains("has 48 rows"), "{msg}");
    let other = fixtures().into_iter().find(|f| f.name == "xgb_multiclass").unwrap();
    let shap = dir.path().join("s.parquet");
    assert!(run(&[
        "explain",
        "--model",
        other.model_path.to_str().unwrap(),
        "--input",
        other.input_path().to_str().unwrap(),
        "--output",
        shap.to_str().unwrap()
    ])
    .status
    .success());
    let o = run(&["plot", "summary", "--shap", shap.to_str().unwrap(), "--input", "examples/data/payments.parquet", "-o", out.to_str().unwrap()]);
    let msg = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(65), "bad data: {msg}");
    assert!(msg.contains("has 48 rows but examples/data/payments.parquet has"), "{msg}");
    assert!(!out.exists(), "a failed plot left a file");
}
