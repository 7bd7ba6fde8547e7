//! Serves the in-memory API server over HTTP until Ctrl-C, for poking at it with kubectl:
//!
//! ```sh
//! cargo run -p karpenter-sim --example serve -- /tmp/sim.kubeconfig
//! kubectl --kubeconfig /tmp/sim.kubeconfig get nodepools
//! ```

use std::path::PathBuf;

use karpenter_sim::{ApiServer, SystemClock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kubeconfig = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| "sim.kubeconfig".into());
    let server = ApiServer::new(SystemClock);
    let http = server.serve_http(([127, 0, 0, 1], 0).into()).await?;
    http.write_kubeconfig(&kubeconfig)?;
    println!("serving {} (kubeconfig {})", http.url(), kubeconfig.display());
    tokio::signal::ctrl_c().await?;
    http.shutdown().await;
    Ok(())
}
