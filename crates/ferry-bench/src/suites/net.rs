//! `net` / `null-roundtrip`: a message with no payload there and back
//! between two hosts' network servers over loopback, against a raw QUIC
//! echo (`quinn`, the same TLS 1.3 setup) and a raw TCP echo of the same
//! bytes. Everything runs in this process on threads (the nodes, their
//! tokio runtimes and the echo servers), unpinned whatever the placement
//! asks, since a network server is a set of threads. The target:
//! `ferry-net` within 1.3× of `quic-raw`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::{Message, Timeout};
use ferry_net::{Identity, Node, NodeConfig, Peer};

use crate::harness::{Case, Impl, Run, Skip, Suite};
use crate::record::Touch;

/// The suite.
pub fn suite() -> Suite {
    Suite {
        name: "net",
        about: "null message round trip through two network servers over loopback vs raw QUIC and TCP echoes",
        reference: "quic-raw",
        cases,
        impls,
    }
}

/// `null-roundtrip`, no payload.
pub fn cases() -> Vec<Case> {
    vec![Case { suite: "net", name: "null-roundtrip", bytes: 0, touch: Touch::None }]
}

/// ferry-net and the baselines.
pub fn impls() -> Vec<Impl> {
    vec![
        Impl { name: "ferry-net", run: ferry_net_roundtrip },
        Impl { name: "quic-raw", run: quic_raw },
        Impl { name: "tcp-raw", run: tcp_raw },
    ]
}

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn skip(e: impl std::fmt::Display) -> Skip {
    Skip::new(format!("failed: {e}"))
}

/// Runs `f` with this thread unpinned, so threads it starts run anywhere,
/// then pins the thread back where the placement put it.
fn unpinned<T>(run: &Run<'_>, f: impl FnOnce() -> T) -> T {
    let allowed = crate::pin::allowed_cpus().unwrap_or_default();
    let _ = crate::pin::unpin(&allowed);
    let out = f();
    if let Some(cpu) = run.own_cpu() {
        let _ = crate::pin::pin_to(cpu);
    }
    out
}

fn ferry_net_roundtrip(run: &mut Run<'_>) -> Result<(), Skip> {
    run.note("placement_ignored", "threads in one process, unpinned");
    let (a, b, echo, stop) = unpinned(run, || -> Result<_, Skip> {
        let ia = Identity::generate("a").map_err(skip)?;
        let ib = Identity::generate("b").map_err(skip)?;
        let a = Node::start(NodeConfig::new(ia.clone(), vec![Peer { name: "b".into(), cert: ib.cert.clone() }], loopback())).map_err(skip)?;
        let b = Node::start(NodeConfig::new(ib, vec![Peer { name: "a".into(), cert: ia.cert.clone() }], loopback())).map_err(skip)?;
        b.connect("a", a.local_addr().map_err(skip)?).map_err(skip)?;
        let (mut srv, to_srv) = ferry::port().map_err(skip)?;
        a.export("echo", to_srv);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        // The echo server: the first message brings the reply right.
        let echo = std::thread::spawn(move || {
            let Ok(mut first) = srv.recv(WAIT) else { return };
            let Some(ferry::Item::Send(back)) = first.take_items().pop() else { return };
            let _ = back.send(Message::new(0), WAIT);
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                match srv.recv(Timeout::millis(200)) {
                    Ok(_) => {
                        if back.send(Message::new(0), WAIT).is_err() {
                            return;
                        }
                    }
                    Err(ferry::RecvError::Timeout) => continue,
                    Err(_) => return,
                }
            }
        });
        Ok((a, b, echo, stop))
    })?;
    let remote = b.lookup("echo@a").map_err(skip)?;
    let (mut me, my_tx) = ferry::port().map_err(skip)?;
    remote.send(Message::new(0).with_item(my_tx), WAIT)?;
    me.recv(WAIT)?;
    while run.more() {
        let t = Instant::now();
        remote.send(Message::new(0), WAIT)?;
        me.recv(WAIT)?;
        run.record(t.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = echo.join();
    drop((remote, a, b));
    Ok(())
}

fn quic_raw(run: &mut Run<'_>) -> Result<(), Skip> {
    run.note("placement_ignored", "threads in one process, unpinned");
    run.note("token_bytes", 1u64);
    let rt = unpinned(run, || tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()).map_err(skip)?;
    let ia = Identity::generate("a").map_err(skip)?;
    let ib = Identity::generate("b").map_err(skip)?;
    let server_cfg = ferry_net::tls::quic_server_config(&ia, vec![Peer { name: "b".into(), cert: ib.cert.clone() }]).map_err(skip)?;
    let client_cfg = ferry_net::tls::quic_client_config(&ib, &Peer { name: "a".into(), cert: ia.cert.clone() }).map_err(skip)?;
    let (server, addr) = rt
        .block_on(async {
            let ep = quinn::Endpoint::server(server_cfg, loopback())?;
            let addr = ep.local_addr()?;
            Ok::<_, std::io::Error>((ep, addr))
        })
        .map_err(skip)?;
    let srv = server.clone();
    rt.spawn(async move {
        let Some(inc) = srv.accept().await else { return };
        let Ok(conn) = inc.await else { return };
        let Ok((mut send, mut recv)) = conn.accept_bi().await else { return };
        let mut b = [0u8; 1];
        while recv.read_exact(&mut b).await.is_ok() {
            if send.write_all(&b).await.is_err() {
                return;
            }
        }
    });
    let (conn, mut send, mut recv) = rt
        .block_on(async {
            let mut ep = quinn::Endpoint::client(loopback())?;
            ep.set_default_client_config(client_cfg);
            let conn = ep.connect(addr, "ferry-peer").map_err(std::io::Error::other)?.await?;
            let (send, recv) = conn.open_bi().await?;
            Ok::<_, std::io::Error>((conn, send, recv))
        })
        .map_err(skip)?;
    let mut b = [1u8; 1];
    while run.more() {
        let t = Instant::now();
        rt.block_on(async {
            send.write_all(&b).await.map_err(skip)?;
            recv.read_exact(&mut b).await.map_err(skip)
        })?;
        run.record(t.elapsed());
    }
    conn.close(0u32.into(), b"done");
    server.close(0u32.into(), b"done");
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

fn tcp_raw(run: &mut Run<'_>) -> Result<(), Skip> {
    run.note("placement_ignored", "threads in one process, unpinned");
    run.note("token_bytes", 1u64);
    let l = TcpListener::bind(loopback()).map_err(skip)?;
    let addr = l.local_addr().map_err(skip)?;
    let echo = unpinned(run, || {
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            let _ = s.set_nodelay(true);
            let mut b = [0u8; 1];
            while s.read_exact(&mut b).is_ok() {
                if s.write_all(&b).is_err() {
                    return;
                }
            }
        })
    });
    let mut c = TcpStream::connect(addr).map_err(skip)?;
    c.set_nodelay(true).map_err(skip)?;
    let mut b = [1u8; 1];
    while run.more() {
        let t = Instant::now();
        c.write_all(&b).map_err(skip)?;
        c.read_exact(&mut b).map_err(skip)?;
        run.record(t.elapsed());
    }
    drop(c);
    let _ = echo.join();
    Ok(())
}
