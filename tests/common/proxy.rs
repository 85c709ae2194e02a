//! A TCP relay between one client and the API server that a test can partition: while cut, bytes
//! stop flowing both ways on every connection (old and new), but nothing is closed, which is what
//! a client on the far side of a network partition sees. Healing closes the connections that were
//! cut (their bytes are lost, as after a long partition) and new ones flow again.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Partition {
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Partition {
    /// Relays 127.0.0.1:<some port> to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, _) = watch::channel(false);
        let sender = cut.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, sender.subscribe()));
            }
        });
        Self { addr, cut, accept }
    }

    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    /// A copy of the kubeconfig at `original` whose server is this relay, written under `dir`.
    pub fn kubeconfig(&self, original: &Path, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(original).unwrap();
        let rewritten: String = text
            .lines()
            .map(|line| match line.trim_start().strip_prefix("server: ") {
                Some(_) => {
                    let indent = &line[..line.len() - line.trim_start().len()];
                    format!("{indent}server: https://{}\n", self.addr)
                }
                None => format!("{line}\n"),
            })
            .collect();
        assert_ne!(text, rewritten, "no server: line in {}", original.display());
        let path = dir.join(format!("kubeconfig-via-{}", self.addr.port()));
        std::fs::write(&path, rewritten).unwrap();
        path
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.accept.abort();
        // Closes every relayed connection.
        self.cut.send_replace(true);
        self.cut.send_replace(false);
    }
}

/// The upstream address of the kubeconfig at `path` (an https://host:port server).
pub fn server_addr(path: &Path) -> SocketAddr {
    let text = std::fs::read_to_string(path).unwrap();
    let server = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server: "))
        .unwrap();
    server
        .trim()
        .trim_start_matches("https://")
        .parse()
        .unwrap()
}

async fn relay(client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    if !*cut.borrow_and_update() {
        if let Ok(server) = TcpStream::connect(upstream).await {
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let flow = async {
                let _ = tokio::join!(
                    tokio::io::copy(&mut client_read, &mut server_write),
                    tokio::io::copy(&mut server_read, &mut client_write),
                );
            };
            tokio::select! {
                () = flow => return,
                _ = cut.wait_for(|cut| *cut) => {}
            }
            // Partitioned: hold both ends open and silent until healed; then they close.
            let _ = cut.wait_for(|cut| !*cut).await;
            return;
        }
        return;
    }
    // Opened during the partition: accepted (a SYN that got through is not the point) but silent.
    let _ = cut.wait_for(|cut| !*cut).await;
    drop(client);
}
