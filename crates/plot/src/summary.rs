//! The summary (beeswarm) chart: a row per feature, a point per input row at its SHAP value,
//! piled up where values are dense, coloured by the feature's value.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::style::{self, ValueScale};
use super::{draw_colour_bar, draw_row_frame, row_range, Chart, Drawn, COLOUR_BAR_AREA};

/// Bins along x in which points pile up (shap's choice).
const BINS: f64 = 100.0;
/// Half the height of a feature's pile, in rows.
const PILE_HALF_HEIGHT: f64 = 0.4;

pub(super) fn draw<DB: DrawingBackend>(chart: &Chart, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let data = chart.data;
    let group = chart.group.unwrap_or(0);
    let names: Vec<String> = chart.order.iter().map(|&j| data.features[j].clone()).collect();
    let n = names.len();
    let (lo, hi) = chart
        .order
        .iter()
        .flat_map(|&j| (0..data.rows).map(move |r| data.shap(r, group, j)))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let y_range = row_range(n);
    let mut plot = ChartBuilder::on(root)
        .caption(&chart.title, style::text(style::TITLE_SIZE))
        .margin(style::MARGIN)
        .margin_right(style::MARGIN + COLOUR_BAR_AREA)
        .x_label_area_size(style::X_AXIS_AREA)
        .y_label_area_size(chart.label_width(root, &names))
        .build_cartesian_2d(style::padded(lo.min(0.0), hi.max(0.0)), y_range)?;
    draw_row_frame(root, &mut plot, &names, "SHAP value (impact on the margin)", true)?;
    let y_top = plot.y_range().end;
    plot.draw_series(LineSeries::new([(0.0, -0.6), (0.0, y_top)], style::GREY.stroke_width(1)))?;

    for (rank, &j) in chart.order.iter().enumerate() {
        let y = (n - 1 - rank) as f64;
        let shap: Vec<f64> = (0..data.rows).map(|r| data.shap(r, group, j)).collect();
        let offsets = pile_offsets(&shap);
        let scale = ValueScale::of((0..data.rows).map(|r| data.value(r, j)));
        // Missing values first, so coloured points stay on top of the grey ones.
        let mut rows: Vec<usize> = (0..data.rows).collect();
        rows.sort_by_key(|&r| !data.value(r, j).is_nan());
        plot.draw_series(rows.into_iter().map(|r| {
            let colour = style::value_colour(scale.position(data.value(r, j)));
            Circle::new((shap[r], y + offsets[r]), 3, colour.mix(0.85).filled())
        }))?;
    }
    draw_colour_bar(root, &plot.plotting_area().get_pixel_range(), "Feature value")
}

/// Vertical offsets that pile points with nearby x values into a swarm, within
/// ±[`PILE_HALF_HEIGHT`] (shap's beeswarm layout, with ties kept in row order).
fn pile_offsets(x: &[f64]) -> Vec<f64> {
    let (lo, hi) = x.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let bin: Vec<i64> = x.iter().map(|&v| (BINS * (v - lo) / (hi - lo + 1e-8)).round() as i64).collect();
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by_key(|&i| bin[i]);
    let mut offsets = vec![0.0; x.len()];
    let (mut layer, mut last) = (0i64, i64::MIN);
    for i in order {
        if bin[i] != last {
            layer = 0;
            last = bin[i];
        }
        // 0, +1, -1, +2, -2, ...
        offsets[i] = ((layer + 1) / 2) as f64 * if layer % 2 == 1 { 1.0 } else { -1.0 };
        layer += 1;
    }
    let widest = offsets.iter().fold(0.0f64, |m, o| m.max(o.abs()));
    let scale = PILE_HALF_HEIGHT / (widest + 1.0);
    offsets.iter_mut().for_each(|o| *o *= scale);
    offsets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piles_alternate_around_the_row_and_stay_inside_it() {
        let offsets = pile_offsets(&[1.0, 1.0, 1.0, 5.0]);
        assert_eq!(offsets[3], 0.0);
        assert_eq!(offsets[0], 0.0);
        assert!(offsets[1] > 0.0 && offsets[2] < 0.0 && (offsets[1] + offsets[2]).abs() < 1e-12);
        assert!(offsets.iter().all(|o| o.abs() <= PILE_HALF_HEIGHT));
    }
}
