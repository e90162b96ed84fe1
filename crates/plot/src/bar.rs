//! The bar chart: mean |SHAP value| per feature, one segment per class when all classes of a
//! multiclass model are stacked.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::style;
use super::{draw_row_frame, mean_abs_shap, row_range, Chart, Drawn};

/// Half the height of a bar, in rows.
const BAR_HALF_HEIGHT: f64 = 0.35;

pub(super) fn draw<DB: DrawingBackend>(chart: &Chart, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let data = chart.data;
    let names: Vec<String> = chart.order.iter().map(|&j| data.features[j].clone()).collect();
    let n = names.len();
    let groups: Vec<usize> = match chart.group {
        Some(g) => vec![g],
        None => (0..data.groups).collect(),
    };
    let per_group: Vec<Vec<f64>> = groups.iter().map(|&g| mean_abs_shap(data, Some(g))).collect();
    let total = |j: usize| per_group.iter().map(|m| m[j]).sum::<f64>();
    let widest = chart.order.iter().map(|&j| total(j)).fold(0.0f64, f64::max);
    let y_range = row_range(n);
    let x_desc = if groups.len() > 1 { "mean |SHAP value| (margin), stacked by class" } else { "mean |SHAP value| (average impact on the margin)" };
    let mut plot = ChartBuilder::on(root)
        .caption(&chart.title, style::text(style::TITLE_SIZE))
        .margin(style::MARGIN)
        .margin_right(style::MARGIN + 40)
        .x_label_area_size(style::X_AXIS_AREA)
        .y_label_area_size(chart.label_width(root, &names))
        // Room right of the longest bar for its number.
        .build_cartesian_2d(0.0..(widest * 1.15).max(f64::MIN_POSITIVE), y_range)?;
    draw_row_frame(root, &mut plot, &names, x_desc, false)?;
    for (rank, &j) in chart.order.iter().enumerate() {
        let y = (n - 1 - rank) as f64;
        let mut start = 0.0;
        for (k, means) in per_group.iter().enumerate() {
            let colour = if groups.len() == 1 { style::RED } else { style::CLASS_COLOURS[k % style::CLASS_COLOURS.len()] };
            let end = start + means[j];
            plot.draw_series(std::iter::once(Rectangle::new([(start, y - BAR_HALF_HEIGHT), (end, y + BAR_HALF_HEIGHT)], colour.filled())))?;
            start = end;
        }
        let at = plot.backend_coord(&(start, y));
        let value = style::text(style::VALUE_SIZE).pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(super::data::format_number(total(j)), (at.0 + 6, at.1), value))?;
    }
    if groups.len() > 1 {
        // A legend in the lower right, where the shortest bars leave room.
        let (xs, ys) = plot.plotting_area().get_pixel_range();
        let label = style::text(style::LABEL_SIZE).pos(Pos::new(HPos::Left, VPos::Center));
        for (k, &g) in groups.iter().enumerate() {
            let y = ys.end - 14 - 20 * (groups.len() - 1 - k) as i32;
            let x = xs.end - 110;
            let colour = style::CLASS_COLOURS[k % style::CLASS_COLOURS.len()];
            root.draw(&Rectangle::new([(x, y - 6), (x + 12, y + 6)], colour.filled()))?;
            root.draw(&Text::new(format!("class {g}"), (x + 18, y), label.clone()))?;
        }
    }
    Ok(())
}
