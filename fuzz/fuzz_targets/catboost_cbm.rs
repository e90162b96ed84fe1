//! Fuzzes the catboost binary (.cbm) reader (and the engines on what it accepts).
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::check(data, shapfusion_core::model::ModelFormat::CatboostBinary));
