//! `shapfusion plot`: the four charts, from an explain output or computed on the fly.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use shapfusion::input::{read_background, RowSelection};
use shapfusion::plot::{render_to_file, ChartKind, ChartOptions, PlotData, DEFAULT_TOP};
use shapfusion::{Explainer, Result};

use super::ComputeArgs;

/// Which chart, with its own arguments.
#[derive(Debug, Subcommand)]
pub enum PlotCommand {
    /// Beeswarm: a row per feature (most important on top), a point per input row at its SHAP
    /// value, coloured by the feature's value.
    Summary(PlotArgs),
    /// Mean |SHAP value| per feature; stacked by class for a multiclass model without --class.
    Bar(PlotArgs),
    /// One feature's SHAP values against its values, coloured by the feature it interacts with
    /// most (or --color).
    Dependence {
        #[command(flatten)]
        args: PlotArgs,
        /// The feature on the x axis.
        #[arg(long)]
        feature: String,
        /// The feature whose values colour the points (default: the one interacting most).
        #[arg(long)]
        color: Option<String>,
    },
    /// One row from the bias to its margin, feature by feature.
    Waterfall {
        #[command(flatten)]
        args: PlotArgs,
        /// The row to draw: its 0-based number in --input.
        #[arg(long)]
        row: usize,
    },
}

/// Inputs and look, shared by every chart.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// SHAP values written by `explain` for --input (Parquet, Arrow IPC or CSV). Without it,
    /// --model explains the rows now.
    #[arg(long, required_unless_present = "model")]
    pub shap: Option<PathBuf>,
    /// Model: explains --input on the fly without --shap; with --shap, names its SHAP columns.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The rows explained: their feature values colour and place the points.
    #[arg(long)]
    pub input: PathBuf,
    /// Image to write: PNG or SVG by the extension.
    #[arg(long, short)]
    pub output: PathBuf,
    /// Output group (class) of a multiclass model.
    #[arg(long)]
    pub class: Option<usize>,
    /// Most features shown.
    #[arg(long, default_value_t = DEFAULT_TOP)]
    pub top: usize,
    /// Rows drawn: a larger input is sampled down to this many, without replacement.
    #[arg(long, default_value_t = 2000)]
    pub max_rows: usize,
    /// Seed of the --max-rows draw: the same seed draws the same rows.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Width in pixels (default 900).
    #[arg(long)]
    pub width: Option<u32>,
    /// Height in pixels (default: fits the features shown).
    #[arg(long)]
    pub height: Option<u32>,
    /// Title above the chart (default: says what is drawn).
    #[arg(long)]
    pub title: Option<String>,
    /// How --model without --shap computes.
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// Background rows for --model: interventional SHAP values instead of path-dependent ones.
    #[arg(long, requires = "model")]
    pub background: Option<PathBuf>,
    /// Use this many background rows, drawn with --seed (all by default).
    #[arg(long, requires = "background")]
    pub background_rows: Option<usize>,
}

/// Draws the chart `command` asks for.
pub fn run(command: PlotCommand) -> Result<()> {
    let (args, kind) = match command {
        PlotCommand::Summary(args) => (args, ChartKind::Summary),
        PlotCommand::Bar(args) => (args, ChartKind::Bar),
        PlotCommand::Dependence { args, feature, color } => (args, ChartKind::Dependence { feature, color }),
        PlotCommand::Waterfall { args, row } => (args, ChartKind::Waterfall { row }),
    };
    // A waterfall needs its one row; the other charts a sample.
    let (selection, kind) = match kind {
        ChartKind::Waterfall { row } => (RowSelection::One(row), ChartKind::Waterfall { row: 0 }),
        kind => (RowSelection::Sample { max_rows: Some(args.max_rows), seed: args.seed }, kind),
    };
    let model = args.model.as_ref().map(shapfusion::load_model).transpose()?;
    let data = match (&args.shap, model) {
        (Some(shap), model) => PlotData::from_files(shap, &args.input, model.as_ref().map(|m| m.feature_names()), selection)?,
        (None, Some(model)) => {
            let background = args.background.as_ref().map(|b| read_background(b, &model, args.background_rows, args.seed)).transpose()?;
            let mut builder = Explainer::builder(model).settings(args.compute.settings()?);
            if let Some(background) = background {
                builder = builder.background(background);
            }
            PlotData::from_model(builder, &args.input, selection)?
        }
        // clap requires --shap or --model.
        (None, None) => return Err(shapfusion::Error::InvalidArgument("give --shap (an explain output) or --model".into())),
    };
    let options = ChartOptions { kind, class: args.class, top: args.top, width: args.width, height: args.height, title: args.title };
    render_to_file(&data, &options, &args.output)?;
    eprintln!("{} chart of {} rows -> {}", options.kind.name(), data.rows, args.output.display());
    Ok(())
}
