//! [`ComputeSettings`]: how attributions are computed (engine, device, threads, the engines'
//! memory bounds), one value with one meaning for every front end. The command line, the SQL
//! session options, the Python package and the wire forms of a call all parse their raw options
//! into it once; everything below takes it as it is.
//!
//! Threads mean the same everywhere: `None` is all cores; a count is capped at the cores of the
//! machine that computes, and [`threads_to_run`](ComputeSettings::threads_to_run) reports what
//! actually runs.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::device::Device;
use crate::engine::{Algorithm, EngineOptions, Index, DEFAULT_INTERVENTIONAL_MEMORY_BYTES, DEFAULT_V2_MEMORY_BYTES};
use crate::error::{Error, Result};

/// How to compute: the engine, the device, the compute threads and the engines' memory bounds.
///
/// Serialises as JSON with names (`{"algorithm": "treeshap", "device": "cpu", "threads": 4, ...}`):
/// it is what a pinned call carries to a worker or a Ballista executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeSettings {
    /// The engine (default `auto`: picked from the model's shape).
    #[serde(with = "by_name")]
    pub algorithm: Algorithm,
    /// Where to compute (default `auto`: the GPU when one is usable and the algorithm is `auto`).
    #[serde(with = "by_name")]
    pub device: Device,
    /// Compute threads: `None` is all cores; a count is capped at the machine's cores.
    #[serde(default)]
    pub threads: Option<usize>,
    /// Most memory fast-v2's tables may take, in bytes.
    pub v2_memory_bytes: usize,
    /// Most memory the interventional engine's aggregated background may take, in bytes.
    pub interventional_memory_bytes: usize,
    /// The attribution index (default `shapley`; `banzhaf` on the CPU only). Optional in the
    /// JSON, so that calls pinned before it existed still parse.
    #[serde(default, with = "by_name")]
    pub index: Index,
}

impl Default for ComputeSettings {
    fn default() -> Self {
        ComputeSettings {
            algorithm: Algorithm::default(),
            device: Device::default(),
            threads: None,
            v2_memory_bytes: DEFAULT_V2_MEMORY_BYTES,
            interventional_memory_bytes: DEFAULT_INTERVENTIONAL_MEMORY_BYTES,
            index: Index::default(),
        }
    }
}

impl ComputeSettings {
    /// Settings from a front end's raw options: engine and device by name, `threads` where 0
    /// also means all cores (SQL's `shap.threads = 0`), fast-v2's bound in MiB. Names are
    /// checked here, so a bad one is refused where it was given.
    pub fn parse(algorithm: &str, device: &str, threads: Option<usize>, v2_memory_mib: usize) -> Result<Self> {
        ComputeSettings::new(algorithm.parse()?, device.parse()?, threads, v2_memory_mib)
    }

    /// [`parse`](Self::parse) for options already typed (the command line's parsers made them).
    pub fn new(algorithm: Algorithm, device: Device, threads: Option<usize>, v2_memory_mib: usize) -> Result<Self> {
        Ok(ComputeSettings {
            algorithm,
            device,
            threads: thread_count(threads),
            v2_memory_bytes: mib_to_bytes(v2_memory_mib, "fast-v2's memory bound")?,
            ..Default::default()
        })
    }

    /// The compute threads that run: the count asked for, capped at this machine's cores, or
    /// all cores.
    pub fn threads_to_run(&self) -> usize {
        let cores = available_cores();
        self.threads.map_or(cores, |t| t.clamp(1, cores))
    }

    /// The knobs the engines take.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions { v2_memory_bytes: self.v2_memory_bytes, interventional_memory_bytes: self.interventional_memory_bytes, index: self.index }
    }

    /// A caller's settings as a server runs them: the caller's engine, device and index, its threads
    /// and memory bounds within the server's own (`host`). A caller that leaves threads unset
    /// gets the server's.
    pub fn within(&self, host: &ComputeSettings) -> ComputeSettings {
        ComputeSettings {
            algorithm: self.algorithm,
            device: self.device,
            threads: match (self.threads, host.threads) {
                (Some(t), Some(h)) => Some(t.min(h)),
                (t, h) => t.or(h),
            },
            v2_memory_bytes: self.v2_memory_bytes.min(host.v2_memory_bytes),
            interventional_memory_bytes: self.interventional_memory_bytes.min(host.interventional_memory_bytes),
            index: self.index,
        }
    }

    /// Whether this machine can honour the device: `gpu` without a usable GPU is an error
    /// naming what is missing, as is `gpu` for Banzhaf values (the GPU engine computes Shapley
    /// values only); `auto` and `cpu` always can.
    pub fn check_device(&self) -> Result<Device> {
        crate::device::device_for(self.device, self.algorithm, self.index)
    }

    /// What computes, as servers report it: `gpu`, or `cpu (N threads)` with the threads that
    /// actually run.
    pub fn describe(&self) -> Result<String> {
        Ok(match self.check_device()? {
            Device::Gpu => "gpu".to_string(),
            _ => format!("cpu ({} threads)", self.threads_to_run()),
        })
    }
}

impl fmt::Display for ComputeSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let threads = self.threads.map_or("all cores".to_string(), |t| format!("{t} threads"));
        write!(f, "algorithm {}, device {}, {threads}", self.algorithm, self.device)?;
        if self.index != Index::Shapley {
            write!(f, ", {} values", self.index)?;
        }
        Ok(())
    }
}

/// A thread count as settings hold it: 0 means all cores, as unset does.
pub(crate) fn thread_count(threads: Option<usize>) -> Option<usize> {
    threads.filter(|&t| t > 0)
}

/// The cores this process may use.
pub(crate) fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `mib` MiB in bytes, or an error naming `what` when it does not fit.
fn mib_to_bytes(mib: usize, what: &str) -> Result<usize> {
    mib.checked_mul(1 << 20).ok_or_else(|| Error::InvalidArgument(format!("{what} of {mib} MiB is too large")))
}

/// Serde by the names the command line and SQL use (`"treeshap"`, `"gpu"`).
mod by_name {
    use std::fmt::Display;
    use std::str::FromStr;

    use super::*;

    pub fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub fn deserialize<'de, T, D>(d: D) -> std::result::Result<T, D::Error>
    where
        T: FromStr<Err = Error>,
        D: Deserializer<'de>,
    {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_options_parse_once_with_one_meaning() {
        let s = ComputeSettings::parse("treeshap", "cpu", Some(0), 64).unwrap();
        assert_eq!((s.algorithm, s.device, s.threads, s.v2_memory_bytes), (Algorithm::TreeShap, Device::Cpu, None, 64 << 20));
        assert_eq!(s.threads_to_run(), available_cores());
        let e = ComputeSettings::parse("fastest", "cpu", None, 1).unwrap_err().to_string();
        assert!(e.contains("unknown algorithm") && e.contains("treeshap"), "{e}");
        let e = ComputeSettings::parse("auto", "tpu", None, 1).unwrap_err().to_string();
        assert!(e.contains("unknown device"), "{e}");
        assert!(ComputeSettings::parse("auto", "auto", None, usize::MAX).is_err());
    }

    #[test]
    fn threads_are_capped_at_the_cores_and_reported_as_they_run() {
        let cores = available_cores();
        let many = ComputeSettings { threads: Some(1000), device: Device::Cpu, ..Default::default() };
        assert_eq!(many.threads_to_run(), cores);
        assert_eq!(many.describe().unwrap(), format!("cpu ({cores} threads)"));
        assert_eq!(ComputeSettings { threads: Some(1), ..Default::default() }.threads_to_run(), 1);
    }

    #[test]
    fn a_callers_settings_stay_within_the_servers() {
        let host = ComputeSettings { threads: Some(2), v2_memory_bytes: 1 << 20, ..Default::default() };
        let caller = ComputeSettings { algorithm: Algorithm::TreeShap, threads: Some(8), ..Default::default() };
        let run = caller.within(&host);
        assert_eq!((run.algorithm, run.threads, run.v2_memory_bytes), (Algorithm::TreeShap, Some(2), 1 << 20));
        assert_eq!(ComputeSettings::default().within(&host).threads, Some(2));
    }

    #[test]
    fn settings_travel_as_json_by_name() {
        let s = ComputeSettings { algorithm: Algorithm::FastV2, device: Device::Cpu, threads: Some(3), ..Default::default() };
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""algorithm":"fast-v2""#) && json.contains(r#""device":"cpu""#), "{json}");
        assert_eq!(serde_json::from_str::<ComputeSettings>(&json).unwrap(), s);
        let e = serde_json::from_str::<ComputeSettings>(&json.replace("fast-v2", "fastest")).unwrap_err().to_string();
        assert!(e.contains("unknown algorithm"), "{e}");
        // The index travels by name, and a call that names none (made before it existed) is
        // Shapley values.
        let banzhaf = ComputeSettings { index: Index::Banzhaf, ..s };
        let json = serde_json::to_string(&banzhaf).unwrap();
        assert!(json.contains(r#""index":"banzhaf""#), "{json}");
        assert_eq!(serde_json::from_str::<ComputeSettings>(&json).unwrap(), banzhaf);
        assert_eq!(serde_json::from_str::<ComputeSettings>(&json.replace(r#","index":"banzhaf""#, "")).unwrap(), s);
        // On the CPU: auto stays there, gpu is refused by name.
        assert_eq!(ComputeSettings { device: Device::Auto, ..banzhaf }.check_device().unwrap(), Device::Cpu);
        let e = ComputeSettings { device: Device::Gpu, ..banzhaf }.check_device().unwrap_err().to_string();
        assert!(e.contains("Shapley values only"), "{e}");
    }
}
