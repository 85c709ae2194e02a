//! A network namespace of the test's own, with only `lo`: a server that listens on every
//! address (the llm-d inference simulator has no flag to bind one) is reachable there from
//! loopback alone. The test reaches it through relays on the host's 127.0.0.1 whose upstream
//! sockets are made inside the namespace, by a thread that joined it (setns(2) moves only the
//! calling thread, and a socket stays in the namespace it was made in).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::process::Command;
use std::sync::mpsc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type ConnectRequest = (
    SocketAddr,
    oneshot::Sender<std::io::Result<std::net::TcpStream>>,
);

pub struct NetNs {
    pub name: String,
    connect: mpsc::Sender<ConnectRequest>,
    relays: Vec<tokio::task::JoinHandle<()>>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2) runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl NetNs {
    /// Creates the namespace, brings its `lo` up and starts the thread that connects from it.
    pub fn create(prefix: &str) -> Self {
        let name = format!("{prefix}-{}-{}", std::process::id(), fastrand::u32(..));
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        let path = format!("/var/run/netns/{name}");
        let (connect, requests) = mpsc::channel::<ConnectRequest>();
        let (joined, joined_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let joined_ns = std::fs::File::open(&path)
                .map_err(|e| e.to_string())
                .and_then(|ns| {
                    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(|e| e.to_string())
                });
            let ok = joined_ns.is_ok();
            joined.send(joined_ns).unwrap();
            if !ok {
                return;
            }
            for (addr, reply) in requests {
                let stream = std::net::TcpStream::connect(addr).and_then(|s| {
                    s.set_nonblocking(true)?;
                    Ok(s)
                });
                let _ = reply.send(stream);
            }
        });
        joined_rx
            .recv()
            .unwrap()
            .expect("the connecting thread joins the namespace");
        Self {
            name,
            connect,
            relays: Vec::new(),
        }
    }

    /// `program` to be run inside the namespace.
    pub fn command(&self, program: &std::path::Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command.kill_on_drop(true);
        command
    }

    /// A connection to `addr` as seen from inside the namespace.
    pub async fn connect(&self, addr: SocketAddr) -> std::io::Result<TcpStream> {
        let (reply, answer) = oneshot::channel();
        self.connect
            .send((addr, reply))
            .map_err(|_| std::io::Error::other("the connecting thread is gone"))?;
        let stream = answer
            .await
            .map_err(|_| std::io::Error::other("the connecting thread is gone"))??;
        TcpStream::from_std(stream)
    }

    /// Relays 127.0.0.1:<a free port> on the host to `inside` in the namespace; returns the
    /// host address.
    pub async fn relay(&mut self, inside: SocketAddr) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connect = self.connect.clone();
        self.relays.push(tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let connect = connect.clone();
                tokio::spawn(async move {
                    let (reply, answer) = oneshot::channel();
                    if connect.send((inside, reply)).is_err() {
                        return;
                    }
                    let Ok(Ok(upstream)) = answer.await else {
                        return;
                    };
                    let Ok(mut upstream) = TcpStream::from_std(upstream) else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        }));
        addr
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        for relay in &self.relays {
            relay.abort();
        }
        // The processes started in it are killed on drop of their handles (kill_on_drop), which
        // the test holds longer than this; a namespace still in use is only unlinked here.
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}
