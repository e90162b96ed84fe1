//! A `shapfusion` server process for the tests that talk to one over the network, and the
//! Flight SQL client calls they share.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_shapfusion");

/// A server process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `shapfusion <args> --listen 127.0.0.1:0` and waits for its address line.
    pub fn start(args: &[&str]) -> Server {
        Server::start_with_lines(args, 1).0
    }

    /// [`start`](Self::start), returning the first `lines` lines the server prints (its
    /// address first, then, say, its metrics address).
    pub fn start_with_lines(args: &[&str], lines: usize) -> (Server, Vec<String>) {
        let mut child = Command::new(BIN)
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--log", "warn"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start shapfusion");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let printed: Vec<String> = (0..lines)
            .map(|_| {
                let mut line = String::new();
                stdout.read_line(&mut line).expect("read the server's output");
                line.trim().to_string()
            })
            .collect();
        let url = printed[0].rsplit(' ').next().unwrap_or_default().to_string();
        assert!(url.starts_with("http://127.0.0.1:") || url.starts_with("https://127.0.0.1:"), "unexpected first line {:?}", printed[0]);
        (Server { child, url }, printed)
    }

    /// Sends a signal (`-TERM`, `-KILL`) to the process.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill {sig}");
    }
}

/// A Flight SQL client of the server at `url`.
#[cfg(feature = "flight")]
pub async fn sql_client(url: &str) -> arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string()).unwrap().connect().await.unwrap();
    arrow_flight::sql::client::FlightSqlServiceClient::new(channel)
}

/// Runs a statement and fetches its result, or the error as text.
#[cfg(feature = "flight")]
pub async fn sql_result(
    c: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    sql: &str,
) -> Result<arrow::array::RecordBatch, String> {
    let info = c.execute(sql.to_string(), None).await.map_err(|e| e.to_string())?;
    fetch(c, info).await
}

/// Fetches the rows of a Flight SQL `FlightInfo` (every endpoint's, in order), or the error as
/// text.
#[cfg(feature = "flight")]
pub async fn fetch(
    c: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    info: arrow_flight::FlightInfo,
) -> Result<arrow::array::RecordBatch, String> {
    use futures::TryStreamExt;
    let schema = std::sync::Arc::new(info.clone().try_decode_schema().unwrap());
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let stream = c.do_get(endpoint.ticket.unwrap()).await.map_err(|e| e.to_string())?;
        batches.extend(stream.try_collect::<Vec<_>>().await.map_err(|e| e.to_string())?);
    }
    Ok(arrow::compute::concat_batches(&schema, &batches).unwrap())
}
