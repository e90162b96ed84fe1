//! The process's compute threads: one rayon pool per thread count, shared by every front end
//! (an `Explainer` built per SQL query or Flight request must not start threads of its own).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, ErrorKind, Result};

/// The process's pool of `threads` compute threads ([`ComputeSettings::threads_to_run`](crate::settings::ComputeSettings::threads_to_run),
/// already capped at the cores). Pools are shared by every front end, so a process keeps one
/// pool per thread count. Results do not depend on the pool.
pub(crate) fn compute_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let threads = threads.clamp(1, crate::settings::available_cores());
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = pools.get(&threads) {
        return Ok(pool.clone());
    }
    let builder = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("shapfusion-compute-{i}")).num_threads(threads);
    let pool = Arc::new(builder.build().map_err(|e| Error::external(ErrorKind::Internal, format!("cannot start {threads} compute threads"), e))?);
    pools.insert(threads, pool.clone());
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_pools_are_shared_and_capped_at_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let all = compute_pool(cores).unwrap();
        assert_eq!(all.current_num_threads(), cores);
        assert!(Arc::ptr_eq(&all, &compute_pool(100_000).unwrap()));
        if cores > 1 {
            assert_eq!(compute_pool(1).unwrap().current_num_threads(), 1);
        }
    }
}
