//! The waterfall chart: one row's margin built up from the bias, feature by feature, the
//! largest contributions on top and the smallest summed into one bar at the bottom.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::data::format_number;
use super::style;
use super::{draw_row_frame, row_range, Chart, Drawn};

/// Half the height of a bar, in rows.
const BAR_HALF_HEIGHT: f64 = 0.38;

/// One bar: its label, and the contribution it adds.
struct Step {
    label: String,
    shap: f64,
}

pub(super) fn draw<DB: DrawingBackend>(chart: &Chart, root: &DrawingArea<DB, Shift>, row: usize) -> Drawn<DB> {
    let data = chart.data;
    let group = chart.group.unwrap_or(0);
    let f = data.features.len();
    let bias = data.shap(row, group, f);
    let mut by_size: Vec<usize> = (0..f).collect();
    by_size.sort_by(|&a, &b| data.shap(row, group, b).abs().total_cmp(&data.shap(row, group, a).abs()).then(a.cmp(&b)));
    let shown = chart.options.top.min(f);
    // Bottom-up: the rest first (nearest the bias), then the shown ones, largest last (on top).
    let mut steps = Vec::with_capacity(shown + 1);
    if shown < f {
        let rest: f64 = by_size[shown..].iter().map(|&j| data.shap(row, group, j)).sum();
        steps.push(Step { label: format!("{} other features", f - shown), shap: rest });
    }
    for &j in by_size[..shown].iter().rev() {
        steps.push(Step { label: format!("{} = {}", data.features[j], data.value_text(row, j)), shap: data.shap(row, group, j) });
    }
    let margin = bias + steps.iter().map(|s| s.shap).sum::<f64>();
    // Extent of every running total, for the x axis.
    let (mut lo, mut hi, mut at) = (bias, bias, bias);
    for s in &steps {
        at += s.shap;
        lo = lo.min(at);
        hi = hi.max(at);
    }
    let names: Vec<String> = steps.iter().rev().map(|s| s.label.clone()).collect();
    let y_range = row_range(steps.len());
    let mut plot = ChartBuilder::on(root)
        .caption(&chart.title, style::text(style::TITLE_SIZE))
        .margin(style::MARGIN)
        .margin_top(style::MARGIN + 10)
        .margin_right(style::MARGIN + 30)
        .x_label_area_size(style::X_AXIS_AREA)
        .y_label_area_size(chart.label_width(root, &names))
        .build_cartesian_2d(style::padded(lo, hi), y_range)?;
    let x_desc = format!("margin: bias {} + SHAP values = {}", format_number(bias), format_number(margin));
    draw_row_frame(root, &mut plot, &names, &x_desc, false)?;
    let top = plot.y_range().end;
    let bottom = plot.y_range().start;
    for (x, _) in [(bias, "bias"), (margin, "margin")] {
        plot.draw_series(DashedLineSeries::new([(x, bottom), (x, top)], 4, 3, style::GREY.stroke_width(1)))?;
    }
    let mut start = bias;
    for (y, step) in steps.iter().enumerate() {
        let y = y as f64;
        let end = start + step.shap;
        let colour = if step.shap >= 0.0 { style::RED } else { style::BLUE };
        plot.draw_series(std::iter::once(Rectangle::new([(start, y - BAR_HALF_HEIGHT), (end, y + BAR_HALF_HEIGHT)], colour.filled())))?;
        // The number right of the bar, whichever way it points: left of it are the names.
        let (px, py) = plot.backend_coord(&(start.max(end), y));
        let text = format!("{}{}", if step.shap >= 0.0 { "+" } else { "" }, format_number(step.shap));
        root.draw(&Text::new(text, (px + 5, py), style::text(style::VALUE_SIZE).pos(Pos::new(HPos::Left, VPos::Center))))?;
        start = end;
    }
    // Name the two ends above the plot.
    let label = style::text(style::VALUE_SIZE).pos(Pos::new(HPos::Center, VPos::Bottom));
    let (bx, by) = plot.backend_coord(&(bias, top));
    let (mx, _) = plot.backend_coord(&(margin, top));
    let ends = if (bx - mx).abs() < 120 && bx > mx {
        [(bx + 40, "bias"), (mx - 40, "f(x)")]
    } else if (bx - mx).abs() < 120 {
        [(bx - 40, "bias"), (mx + 40, "f(x)")]
    } else {
        [(bx, "bias"), (mx, "f(x)")]
    };
    for (x, name) in ends {
        let value = if name == "bias" { bias } else { margin };
        root.draw(&Text::new(format!("{name} = {}", format_number(value)), (x, by - 3), label.clone()))?;
    }
    Ok(())
}
