//! The dependence chart: one feature's SHAP values against its values, coloured by a second
//! feature, by default the one it appears to interact with most.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::data::{format_number, PlotData};
use super::style::{self, ValueScale};
use super::{draw_colour_bar, Chart, Drawn, COLOUR_BAR_AREA};

pub(super) fn draw<DB: DrawingBackend>(chart: &Chart, root: &DrawingArea<DB, Shift>, feature: &str, color: Option<&str>) -> Drawn<DB> {
    let data = chart.data;
    let group = chart.group.unwrap_or(0);
    // `plan` checked both names.
    let j = data.feature_index(feature).unwrap_or(0);
    let c = match color {
        Some(name) => data.feature_index(name).ok(),
        None => most_interacting(data, group, j),
    };
    let points: Vec<(f64, f64, usize)> =
        (0..data.rows).filter(|&r| !data.value(r, j).is_nan()).map(|r| (data.value(r, j), data.shap(r, group, j), r)).collect();
    let bounds = |v: &mut dyn Iterator<Item = f64>| v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (x_lo, x_hi) = bounds(&mut points.iter().map(|p| p.0));
    let (y_lo, y_hi) = bounds(&mut points.iter().map(|p| p.1));
    let labels = data.labels[j].clone();
    let missing = data.rows - points.len();
    let x_desc = match missing {
        0 => feature.to_string(),
        m => format!("{feature} ({m} rows with it missing not shown)"),
    };
    let mut plot = ChartBuilder::on(root)
        .caption(&chart.title, style::text(style::TITLE_SIZE))
        .margin(style::MARGIN)
        .margin_right(style::MARGIN + if c.is_some() { COLOUR_BAR_AREA } else { 0 })
        .x_label_area_size(style::X_AXIS_AREA)
        .y_label_area_size(80)
        .build_cartesian_2d(style::padded(x_lo, x_hi), style::padded(y_lo.min(0.0), y_hi.max(0.0)))?;
    plot.configure_mesh()
        .x_label_formatter(&|x| match &labels {
            // A string feature's codes are drawn at whole numbers: name them.
            Some(names) if x.fract() == 0.0 && *x >= 0.0 => names.get(*x as usize).cloned().unwrap_or_default(),
            Some(_) => String::new(),
            None => format_number(*x),
        })
        .y_label_formatter(&|y| format_number(*y))
        .x_desc(x_desc)
        .y_desc(format!("SHAP value of {feature} (margin)"))
        .label_style(style::text(style::LABEL_SIZE))
        .axis_desc_style(style::text(style::LABEL_SIZE))
        .bold_line_style(style::GRID)
        .light_line_style(TRANSPARENT)
        .draw()?;
    let scale = c.map(|c| ValueScale::of((0..data.rows).map(|r| data.value(r, c))));
    plot.draw_series(points.iter().map(|&(x, y, r)| {
        let colour = match (c, scale) {
            (Some(c), Some(scale)) => style::value_colour(scale.position(data.value(r, c))),
            _ => style::BLUE,
        };
        Circle::new((x, y), 3, colour.mix(0.8).filled())
    }))?;
    if let Some(c) = c {
        draw_colour_bar(root, &plot.plotting_area().get_pixel_range(), &data.features[c])?;
    }
    Ok(())
}

/// The feature whose values best explain the spread of feature `j`'s SHAP values at equal
/// values of `j`: shap's `approximate_interactions` heuristic. Rows are sorted by `j`'s value
/// and cut into runs of up to 50; in each run the |correlation| between `j`'s SHAP values and
/// another feature's values (and, separately, its being missing) is summed. `None` when the
/// model has no other feature.
pub(super) fn most_interacting(data: &PlotData, group: usize, j: usize) -> Option<usize> {
    let mut order: Vec<usize> = (0..data.rows).collect();
    order.sort_by(|&a, &b| data.value(a, j).total_cmp(&data.value(b, j)));
    let shap: Vec<f64> = order.iter().map(|&r| data.shap(r, group, j)).collect();
    let run = (data.rows / 10).clamp(1, 50);
    let score = |other: &[f64]| -> f64 {
        if other.iter().map(|v| v.abs()).sum::<f64>() < 1e-8 {
            return 0.0;
        }
        shap.chunks(run).zip(other.chunks(run)).map(|(s, o)| correlation(s, o).abs()).filter(|c| c.is_finite()).sum()
    };
    (0..data.features.len())
        .filter(|&k| k != j)
        .map(|k| {
            let values: Vec<f64> = order.iter().map(|&r| data.value(r, k)).collect();
            let is_missing: Vec<f64> = values.iter().map(|v| f64::from(u8::from(v.is_nan()))).collect();
            (k, score(&values).max(score(&is_missing)))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(k, _)| k)
}

/// Pearson correlation; NaN when either side is constant or holds a NaN (shap skips such runs).
fn correlation(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    if saa > 0.0 && sbb > 0.0 {
        sab / (saa * sbb).sqrt()
    } else {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feature_that_modulates_the_shap_values_is_found() {
        // φ_0 = x0 · x2: at equal x0, the spread of φ_0 follows x2, not x1.
        let rows = 400;
        let mut values = Vec::new();
        let mut shap = Vec::new();
        for r in 0..rows {
            let (x0, x1, x2) = ((r / 20) as f64, ((r * 7) % 13) as f64, ((r * 11) % 17) as f64 - 8.0);
            values.extend([x0, x1, x2]);
            shap.extend([x0 * x2, 0.1 * x1, 0.0, 1.0]);
        }
        let data = PlotData {
            features: vec!["x0".into(), "x1".into(), "x2".into()],
            rows,
            groups: 1,
            values,
            labels: vec![None, None, None],
            shap,
            row_numbers: (0..rows).collect(),
        };
        assert_eq!(most_interacting(&data, 0, 0), Some(2));
        assert!(correlation(&[1.0, 1.0], &[1.0, 2.0]).is_nan());
        assert!((correlation(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.5]) - 1.0).abs() < 1e-2);
    }
}
