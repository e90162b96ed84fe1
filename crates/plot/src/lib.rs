//! # shapfusion-plot
//!
//! Charts of SHAP values, drawn in Rust (plotters) as PNG or SVG: the pictures every SHAP user
//! looks at first.
//!
//! * `summary` (beeswarm): one row per feature, most important (mean |φ|) on top, a point per
//!   row at its SHAP value, coloured by the feature's value from low (blue) to high (red).
//! * `bar`: mean |φ| per feature; for a multiclass model one stacked segment per class.
//! * `dependence`: φ of one feature against its value, coloured by the feature it interacts
//!   with most (shap's heuristic) or a chosen one.
//! * `waterfall`: one row's path from the bias to its margin, feature by feature.
//!
//! Every value is in margin units (log-odds for binary models, raw scores for regression). A
//! chart is drawn from [`PlotData`]: an `explain` output with its input, or a model and input
//! explained on the fly.
//!
//! What it may use: `shapfusion-core`, `shapfusion-files` (the files charts are drawn from)
//! and plotters.
#![warn(missing_docs)]

mod bar;
mod data;
mod dependence;
mod style;
mod summary;
mod waterfall;

use std::path::Path;

use plotters::prelude::*;

use shapfusion_core::error::{Error, Result};
use shapfusion_files::atomic_file::AtomicFile;

pub use data::PlotData;

/// Which chart to draw, with its own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChartKind {
    /// Beeswarm of every feature's SHAP values, coloured by value.
    Summary,
    /// Mean |SHAP value| per feature.
    Bar,
    /// One feature's SHAP values against its values.
    Dependence {
        /// The feature on the x axis.
        feature: String,
        /// The feature whose values colour the points (default: the one it interacts with most).
        color: Option<String>,
    },
    /// One row from the bias to its margin.
    Waterfall {
        /// The row, an index into [`PlotData`]'s rows.
        row: usize,
    },
}

impl ChartKind {
    /// The kind's name, as the command line spells it.
    pub fn name(&self) -> &'static str {
        match self {
            ChartKind::Summary => "summary",
            ChartKind::Bar => "bar",
            ChartKind::Dependence { .. } => "dependence",
            ChartKind::Waterfall { .. } => "waterfall",
        }
    }
}

/// How a chart is drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartOptions {
    /// What to draw.
    pub kind: ChartKind,
    /// Output group (class) of a multiclass model; required there, except for `bar`, which
    /// stacks all classes without it.
    pub class: Option<usize>,
    /// Most features shown; the rest are left out (`waterfall` sums them into one bar).
    pub top: usize,
    /// Width in pixels (default 900).
    pub width: Option<u32>,
    /// Height in pixels (default: tall enough for the features shown; 600 for `dependence`).
    pub height: Option<u32>,
    /// Title above the chart (default: says what is drawn).
    pub title: Option<String>,
}

impl ChartOptions {
    /// Options for `kind` with the defaults: 20 features, sized to fit, a descriptive title.
    pub fn new(kind: ChartKind) -> ChartOptions {
        ChartOptions { kind, class: None, top: DEFAULT_TOP, width: None, height: None, title: None }
    }
}

/// Features shown by default.
pub const DEFAULT_TOP: usize = 20;

/// Image file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// Portable Network Graphics.
    Png,
    /// Scalable Vector Graphics.
    Svg,
}

impl ImageFormat {
    /// The format an output path asks for by its extension (`.png` or `.svg`).
    pub fn of_path(path: &Path) -> Result<ImageFormat> {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("png") => Ok(ImageFormat::Png),
            Some("svg") => Ok(ImageFormat::Svg),
            _ => Err(Error::InvalidArgument(format!("{}: name the chart .png or .svg (the extension picks the format)", path.display()))),
        }
    }
}

/// Draws a chart of `data` into `path` (PNG or SVG by its extension). The file appears whole or
/// not at all.
pub fn render_to_file(data: &PlotData, options: &ChartOptions, path: &Path) -> Result<()> {
    let bytes = render(data, options, ImageFormat::of_path(path)?)?;
    let pending = AtomicFile::create(path, &[])?;
    std::io::Write::write_all(&mut pending.file()?, &bytes).map_err(|e| Error::io(path, e))?;
    pending.commit()
}

/// Draws a chart of `data` as the bytes of a PNG or SVG file.
pub fn render(data: &PlotData, options: &ChartOptions, format: ImageFormat) -> Result<Vec<u8>> {
    style::register_font();
    let chart = Chart::plan(data, options)?;
    let (w, h) = chart.size;
    let failed = |detail: String| Error::Draw { chart: options.kind.name().to_string(), detail };
    match format {
        ImageFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
                chart.draw(&root).map_err(|e| failed(e.to_string()))?;
                root.present().map_err(|e| failed(e.to_string()))?;
            }
            Ok(svg.into_bytes())
        }
        ImageFormat::Png => {
            let mut pixels = vec![0u8; w as usize * h as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
                chart.draw(&root).map_err(|e| failed(e.to_string()))?;
                root.present().map_err(|e| failed(e.to_string()))?;
            }
            encode_png(&pixels, w, h).map_err(|e| failed(e.to_string()))
        }
    }
}

/// RGB pixels as a PNG file.
fn encode_png(pixels: &[u8], w: u32, h: u32) -> std::result::Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(pixels)?;
    Ok(out)
}

/// A chart checked against its data and ready to draw on any backend.
struct Chart<'a> {
    data: &'a PlotData,
    options: &'a ChartOptions,
    /// The output group drawn (`None`: all, stacked).
    group: Option<usize>,
    /// Features shown, most important first.
    order: Vec<usize>,
    size: (u32, u32),
    title: String,
}

/// What a drawing step returns.
type Drawn<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

impl<'a> Chart<'a> {
    /// Checks `options` against `data` (class, features, row) and lays the chart out.
    fn plan(data: &'a PlotData, options: &'a ChartOptions) -> Result<Chart<'a>> {
        if data.rows == 0 {
            return Err(Error::InvalidArgument("no rows to plot".into()));
        }
        if options.top == 0 {
            return Err(Error::InvalidArgument("the number of features to draw must be at least 1".into()));
        }
        let group = match options.class {
            Some(k) if k >= data.groups => {
                return Err(Error::InvalidArgument(format!(
                    "class {k} is out of range: the model has {} output{} (classes 0..{})",
                    data.groups,
                    if data.groups == 1 { "" } else { "s" },
                    data.groups - 1
                )))
            }
            Some(k) => Some(k),
            None if data.groups == 1 => Some(0),
            None if options.kind == ChartKind::Bar => None,
            None => {
                return Err(Error::InvalidArgument(format!(
                    "the model has {} outputs (classes); pick the class to draw, 0..{}",
                    data.groups,
                    data.groups - 1
                )))
            }
        };
        let importance = mean_abs_shap(data, group);
        let mut order: Vec<usize> = (0..data.features.len()).collect();
        order.sort_by(|&a, &b| importance[b].total_cmp(&importance[a]).then(a.cmp(&b)));
        let rows_shown = match &options.kind {
            ChartKind::Dependence { feature, color } => {
                data.feature_index(feature)?;
                if let Some(c) = color {
                    data.feature_index(c)?;
                }
                0
            }
            ChartKind::Waterfall { row } => {
                if *row >= data.rows {
                    return Err(Error::InvalidArgument(format!("row {row} is out of range: {} rows to plot (rows count from 0)", data.rows)));
                }
                // The top features and one bar for the rest.
                let shown = options.top.min(data.features.len());
                shown + usize::from(shown < data.features.len())
            }
            _ => options.top.min(data.features.len()),
        };
        order.truncate(options.top);
        let size = (
            options.width.unwrap_or(style::DEFAULT_WIDTH),
            options.height.unwrap_or(match options.kind {
                ChartKind::Dependence { .. } => style::DEPENDENCE_HEIGHT,
                _ => style::FRAME_HEIGHT + style::ROW_HEIGHT * rows_shown as u32,
            }),
        );
        if size.0 < 200 || size.1 < 150 || size.0 > 20_000 || size.1 > 20_000 {
            return Err(Error::InvalidArgument(format!(
                "a chart of {}x{} pixels: width and height must be 200..20000 and 150..20000",
                size.0, size.1
            )));
        }
        let class = match (group, data.groups) {
            (Some(k), g) if g > 1 => format!(", class {k}"),
            _ => String::new(),
        };
        let title = options.title.clone().unwrap_or_else(|| match &options.kind {
            ChartKind::Summary => format!("SHAP values of {} rows{class}", data.rows),
            ChartKind::Bar => format!("Mean |SHAP value| over {} rows{class}", data.rows),
            ChartKind::Dependence { feature, .. } => format!("Dependence on {feature} ({} rows{class})", data.rows),
            ChartKind::Waterfall { row } => format!("Row {}{class}", data.row_numbers[*row]),
        });
        Ok(Chart { data, options, group, order, size, title })
    }

    /// Draws the chart on `root`.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, plotters::coord::Shift>) -> Drawn<DB> {
        root.fill(&WHITE)?;
        match &self.options.kind {
            ChartKind::Summary => summary::draw(self, root),
            ChartKind::Bar => bar::draw(self, root),
            ChartKind::Dependence { feature, color } => dependence::draw(self, root, feature, color.as_deref()),
            ChartKind::Waterfall { row } => waterfall::draw(self, root, *row),
        }
    }

    /// Width in pixels of the widest of `labels` in the label font, plus a gap.
    fn label_width<DB: DrawingBackend>(&self, root: &DrawingArea<DB, plotters::coord::Shift>, labels: &[String]) -> u32 {
        let font = style::text(style::LABEL_SIZE);
        labels.iter().filter_map(|l| root.estimate_text_size(l, &font).ok()).map(|(w, _)| w).max().unwrap_or(0) + 14
    }
}

/// Mean |φ| per feature over the rows, for one group or summed over all groups.
fn mean_abs_shap(data: &PlotData, group: Option<usize>) -> Vec<f64> {
    let groups: Vec<usize> = match group {
        Some(g) => vec![g],
        None => (0..data.groups).collect(),
    };
    (0..data.features.len())
        .map(|j| {
            let total: f64 = (0..data.rows).flat_map(|r| groups.iter().map(move |&g| (r, g))).map(|(r, g)| data.shap(r, g, j).abs()).sum();
            total / data.rows as f64
        })
        .collect()
}

/// The y range of a chart with `n` rows of features at 0..n (the first listed at the top, n-1).
fn row_range(n: usize) -> std::ops::Range<f64> {
    -0.6..n as f64 - 0.4
}

/// The colour scale right of the plot whose pixel area is `plot`: low (blue) at the bottom,
/// high (red) at the top, titled `title` (vertically).
fn draw_colour_bar<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    plot: &(std::ops::Range<i32>, std::ops::Range<i32>),
    title: &str,
) -> Drawn<DB> {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let (xs, ys) = plot;
    let (top, bottom, left) = (ys.start + 10, ys.end - 10, xs.end + 24);
    let steps = 64;
    let height = (bottom - top).max(steps);
    for s in 0..steps {
        let colour = style::value_colour(1.0 - s as f64 / (steps - 1) as f64);
        root.draw(&Rectangle::new([(left, top + height * s / steps), (left + 12, top + height * (s + 1) / steps)], colour.filled()))?;
    }
    let label = style::text(style::LABEL_SIZE);
    root.draw(&Text::new("High", (left + 18, top), label.clone().pos(Pos::new(HPos::Left, VPos::Center))))?;
    root.draw(&Text::new("Low", (left + 18, top + height), label.clone().pos(Pos::new(HPos::Left, VPos::Center))))?;
    let vertical = label.transform(FontTransform::Rotate270).pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(title.to_string(), (left + 40, top + height / 2), vertical))?;
    Ok(())
}

/// Width of the area right of a plot holding its colour bar.
const COLOUR_BAR_AREA: u32 = 90;

/// A chart whose x and y axes are plain numbers.
type Plot<'a, 'b, DB> = ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

/// The frame of a chart with a row per feature (summary, bar, waterfall): the x axis with its
/// title and grid, no y axis, and `names` (listed top-down) right-aligned left of the plot, with
/// a light line across the plot at each row when `lines` is set.
fn draw_row_frame<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    plot: &mut Plot<'_, '_, DB>,
    names: &[String],
    x_desc: &str,
    lines: bool,
) -> Drawn<DB> {
    plot.configure_mesh()
        .disable_y_axis()
        .disable_y_mesh()
        .x_label_formatter(&|x| data::format_number(*x))
        .x_desc(x_desc)
        .label_style(style::text(style::LABEL_SIZE))
        .axis_desc_style(style::text(style::LABEL_SIZE))
        .bold_line_style(style::GRID)
        .light_line_style(TRANSPARENT)
        .draw()?;
    let n = names.len();
    let x_start = plot.x_range().start;
    let x_end = plot.x_range().end;
    let label = style::text(style::LABEL_SIZE)
        .pos(plotters::style::text_anchor::Pos::new(plotters::style::text_anchor::HPos::Right, plotters::style::text_anchor::VPos::Center));
    for (rank, name) in names.iter().enumerate() {
        let y = (n - 1 - rank) as f64;
        if lines {
            plot.draw_series(LineSeries::new([(x_start, y), (x_end, y)], style::GRID.stroke_width(1)))?;
        }
        let (px, py) = plot.backend_coord(&(x_start, y));
        root.draw(&Text::new(name.clone(), (px - 8, py), label.clone()))?;
    }
    Ok(())
}
