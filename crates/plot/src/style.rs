//! The one look of every chart: font, colours, text sizes, margins and the value colour scale.

use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{FontStyle, TextStyle};

/// Font family name the embedded font is registered under.
pub(crate) const FONT: &str = "sans-serif";
/// Title size in pixels.
pub(crate) const TITLE_SIZE: u32 = 20;
/// Axis titles, feature names and tick labels.
pub(crate) const LABEL_SIZE: u32 = 14;
/// Numbers written on bars.
pub(crate) const VALUE_SIZE: u32 = 12;
/// Outer margin in pixels.
pub(crate) const MARGIN: u32 = 16;
/// Height of the area under the plot for tick labels and the axis title.
pub(crate) const X_AXIS_AREA: u32 = 52;
/// Vertical space per feature row in summary, bar and waterfall charts: room for a 14 px
/// name with a gap, so 30 features never overlap.
pub(crate) const ROW_HEIGHT: u32 = 30;
/// Title, axis and margins: the height of a chart with no feature rows.
pub(crate) const FRAME_HEIGHT: u32 = 130;
/// Default width of every chart.
pub(crate) const DEFAULT_WIDTH: u32 = 900;
/// Default height of a dependence chart.
pub(crate) const DEPENDENCE_HEIGHT: u32 = 600;

/// shap's blue (low values, negative contributions).
pub(crate) const BLUE: RGBColor = RGBColor(0, 139, 251);
/// shap's red (high values, positive contributions).
pub(crate) const RED: RGBColor = RGBColor(255, 0, 81);
/// Missing values.
pub(crate) const GREY: RGBColor = RGBColor(150, 150, 150);
/// Axis lines and light grid.
pub(crate) const GRID: RGBColor = RGBColor(225, 225, 225);
/// Text.
pub(crate) const INK: RGBColor = RGBColor(40, 40, 40);

/// Series colours for classes in a stacked bar chart (the Tableau 10 palette).
pub(crate) const CLASS_COLOURS: [RGBColor; 10] = [
    RGBColor(78, 121, 167),
    RGBColor(242, 142, 43),
    RGBColor(225, 87, 89),
    RGBColor(118, 183, 178),
    RGBColor(89, 161, 79),
    RGBColor(237, 201, 72),
    RGBColor(176, 122, 161),
    RGBColor(255, 157, 167),
    RGBColor(156, 117, 95),
    RGBColor(186, 176, 172),
];

/// Registers the embedded DejaVu Sans as [`FONT`], once per process: bitmaps need glyphs, and
/// the host may have no fonts at all (a container).
pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TrueType font shipped by the `dejavu` crate.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// Text of `size` pixels in the chart's ink.
pub(crate) fn text(size: u32) -> TextStyle<'static> {
    (FONT, size).into_font().color(&INK)
}

/// The colour of a value at `t` in 0..=1 of its feature's range: blue (low) through purple
/// to red (high); grey for a missing value (NaN).
pub(crate) fn value_colour(t: f64) -> RGBColor {
    if t.is_nan() {
        return GREY;
    }
    let t = t.clamp(0.0, 1.0);
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * t).round() as u8;
    RGBColor(mix(BLUE.0, RED.0), mix(BLUE.1, RED.1), mix(BLUE.2, RED.2))
}

/// Maps a feature's values to 0..=1 between their 5th and 95th percentiles (as shap does, so
/// a few outliers do not turn every other point the same colour).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueScale {
    low: f64,
    high: f64,
}

impl ValueScale {
    /// The scale of `values` (NaNs ignored).
    pub(crate) fn of(values: impl Iterator<Item = f64>) -> ValueScale {
        let mut v: Vec<f64> = values.filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return ValueScale { low: 0.0, high: 1.0 };
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        let (mut low, mut high) = (at(0.05), at(0.95));
        if low >= high {
            (low, high) = (v[0], v[v.len() - 1]);
        }
        ValueScale { low, high }
    }

    /// Where `x` sits on the scale, clamped to 0..=1 (NaN stays NaN).
    pub(crate) fn position(&self, x: f64) -> f64 {
        if x.is_nan() {
            return f64::NAN;
        }
        if self.high <= self.low {
            return 0.5;
        }
        ((x - self.low) / (self.high - self.low)).clamp(0.0, 1.0)
    }
}

/// A padded axis range around `lo..hi` (5% each side), never empty.
pub(crate) fn padded(lo: f64, hi: f64) -> std::ops::Range<f64> {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    let span = if hi > lo { hi - lo } else { lo.abs().max(1.0) };
    (lo - 0.05 * span)..(hi + 0.05 * span)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_run_from_blue_to_red_and_missing_is_grey() {
        assert_eq!(value_colour(0.0), BLUE);
        assert_eq!(value_colour(1.0), RED);
        assert_eq!(value_colour(f64::NAN), GREY);
        let scale = ValueScale::of((0..=100).map(f64::from));
        assert_eq!(scale.position(5.0), 0.0);
        assert_eq!(scale.position(95.0), 1.0);
        assert!((scale.position(50.0) - 0.5).abs() < 1e-12);
        assert_eq!(ValueScale::of([3.0, 3.0].into_iter()).position(3.0), 0.5);
    }
}
