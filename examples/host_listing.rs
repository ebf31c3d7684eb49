//! Time meshtop's host listing: every image labelled `jr2.dev/module`, in one bollard call.
//!
//! `cargo run --example host_listing -- [RUNS]` prints the number of images and, per call, the
//! wall time in milliseconds (after connecting once), then the median. Used by
//! `scripts/bench-converge.sh`.

use std::time::Instant;

use meshtop::backends::daemon::Daemon;

#[tokio::main]
async fn main() -> Result<(), String> {
    let runs: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().map_err(|e| format!("RUNS: {e}")))
        .transpose()?
        .unwrap_or(5);
    let daemon = Daemon::connect().await.map_err(|e| e.to_string())?;
    let mut times = Vec::new();
    let mut count = 0;
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let images = daemon.labelled_images().await.map_err(|e| e.to_string())?;
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        count = images.len();
    }
    times.sort_by(f64::total_cmp);
    println!("images {count}");
    println!("median_ms {:.3}", times[times.len() / 2]);
    Ok(())
}
