//! Command-line parsing and wiring; no logic of its own beyond turning flags into options.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use shapfusion::engine::{Algorithm, EngineOptions, DEFAULT_V2_MEMORY_BYTES};
use shapfusion::explain::{explain_file, ExplainOptions, OutputKind, DEFAULT_BATCH_ROWS};
use shapfusion::model::Model;
#[cfg(feature = "sql")]
use shapfusion::sql::shell::{self, OutputFormat, ShellOptions};
use shapfusion::Result;

/// Exact SHAP values for XGBoost and LightGBM tree ensembles.
#[derive(Debug, Parser)]
#[command(name = "shapfusion", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    pub log: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Explain every row of a Parquet or CSV file; write attributions as Parquet.
    Explain(ExplainArgs),
    /// SQL with the shap UDFs: an interactive shell, or a batch of statements (-c / -f).
    #[cfg(feature = "sql")]
    Sql(SqlArgs),
    /// Work with model files.
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Describe a model: format, objective, trees, depth, leaves, features, output groups.
    Inspect {
        /// Model file (XGBoost .json/.ubj or LightGBM .txt; the format is read from the content).
        path: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[cfg(feature = "sql")]
#[derive(Debug, Args)]
pub struct SqlArgs {
    /// A statement to run (repeatable; run in order, stopping at the first error).
    #[arg(short = 'c', long = "command")]
    pub commands: Vec<String>,
    /// A file of SQL statements to run (repeatable; run before -c).
    #[arg(short = 'f', long = "file")]
    pub files: Vec<PathBuf>,
    /// A named model, NAME=URL (a path, file://, s3://, gs://, az:// …); repeatable.
    #[arg(long = "model")]
    pub models: Vec<String>,
    /// Where `shap('name', …)` looks for name.json|.ubj|.txt (sets shap.model_dir).
    #[arg(long)]
    pub model_dir: Option<String>,
    /// Output format: table, csv, json, ndjson, or parquet (with --output).
    #[arg(long, default_value = "table")]
    pub format: OutputFormat,
    /// File for --format parquet: receives the result of the last statement.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Do not print timing lines.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Model file (XGBoost .json/.ubj or LightGBM .txt).
    #[arg(long)]
    pub model: PathBuf,
    /// Rows to explain: Parquet, or CSV with a header line.
    #[arg(long)]
    pub input: PathBuf,
    /// Parquet file to write.
    #[arg(long)]
    pub output: PathBuf,
    /// Engine: auto, treeshap, fast-v1 or fast-v2.
    #[arg(long, default_value = "auto")]
    pub algorithm: Algorithm,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write SHAP interaction values (one `interactions` column) instead of SHAP values.
    #[arg(long, conflicts_with = "predict")]
    pub interactions: bool,
    /// Write margin predictions (one `prediction` column) instead of SHAP values.
    #[arg(long)]
    pub predict: bool,
    /// Input columns to copy to the output, comma separated (e.g. an id).
    #[arg(long, value_delimiter = ',')]
    pub keep: Vec<String>,
    /// Rows per batch; memory use grows with it.
    #[arg(long, default_value_t = DEFAULT_BATCH_ROWS)]
    pub batch_rows: usize,
    /// Memory bound for fast-v2's tables, in MiB.
    #[arg(long, default_value_t = DEFAULT_V2_MEMORY_BYTES >> 20)]
    pub v2_memory_mb: usize,
    /// Never draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Explain(a) => {
            let options = ExplainOptions {
                algorithm: a.algorithm,
                threads: a.threads,
                output: if a.interactions {
                    OutputKind::Interactions
                } else if a.predict {
                    OutputKind::Predict
                } else {
                    OutputKind::Shap
                },
                keep: a.keep,
                batch_rows: a.batch_rows,
                progress: !a.no_progress,
                engine: EngineOptions { v2_memory_bytes: a.v2_memory_mb << 20 },
            };
            let s = explain_file(&a.model, &a.input, &a.output, &options)?;
            let rate = if s.seconds > 0.0 { s.rows as f64 / s.seconds } else { 0.0 };
            eprintln!(
                "explained {} rows with {} in {:.2}s ({:.0} rows/s) -> {}",
                s.rows,
                s.algorithm,
                s.seconds,
                rate,
                a.output.display()
            );
            Ok(())
        }
        #[cfg(feature = "sql")]
        Command::Sql(a) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| shapfusion::Error::Input(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(shell::run(ShellOptions {
                commands: a.commands,
                files: a.files,
                models: a.models,
                model_dir: a.model_dir,
                format: a.format,
                output: a.output,
                quiet: a.quiet,
            }))
        }
        Command::Models { command: ModelsCommand::Inspect { path, json } } => {
            let model = Model::load(&path)?;
            let s = model.summary();
            if json {
                println!("{}", serde_json::to_string_pretty(&s).expect("summary serialises"));
            } else {
                println!("model:          {}", path.display());
                println!("format:         {}{}", s.format, s.library_version.map(|v| format!(" (version {v})")).unwrap_or_default());
                println!("objective:      {}", s.objective);
                println!("trees:          {}", s.trees);
                println!("max depth:      {}", s.max_depth);
                println!("leaves:         {}", s.leaves);
                println!("output groups:  {}", s.output_groups);
                println!("base margin:    {:?}", s.base_margin);
                println!("features ({}): {}", s.features.len(), s.features.join(", "));
                if !s.categorical.is_empty() {
                    println!("categorical:    {}", s.categorical.join(", "));
                }
            }
            Ok(())
        }
    }
}
