//! `iceoryx2-poll` and `iceoryx2-event`: the `rpc` / `roundtrip` case
//! through iceoryx2's request-response messaging pattern, the peer ferry's
//! RPC fast path is compared with.
//!
//! Both processes open one request-response service of `[u8; bytes]` each
//! way (a fresh name per round, so concurrent runs never meet). The client
//! writes its request into a loaned shared-memory sample and sends it, the
//! server copies the request out and writes a reply of the same size into a
//! loaned response, and the client copies the reply out: one copy in and one
//! copy out on each side, as in ferry's slot.
//!
//! - `iceoryx2-poll` busy-waits on both sides (`Server::receive` and
//!   `PendingResponse::receive` in a loop): compare with `ferry-call-poll`.
//! - `iceoryx2-event`: request-response carries no wake-ups of its own, so,
//!   as iceoryx2's own event-driven examples do, each direction gets an event
//!   service; a side that finds nothing sleeps in `Listener::blocking_wait_one`
//!   and the sender `notify`s after sending: compare with `ferry-call-block`.
//!
//! iceoryx2 keeps its state in shared memory (`/dev/shm`) and files under
//! its root directory. It runs here with its built-in defaults but its own
//! prefix (`ferrybenchUID_`) and root directory (`ferry-bench-iceoryx2-UID`
//! in the temporary directory, this user's alone); nodes are created without signal handlers (so the
//! benchmark process keeps its own) and every port, service and node is
//! dropped before the round ends, which removes their files and segments.
//! What stays is what iceoryx2 keeps by design: its 16-byte global
//! management segment and the empty `nodes` and `services` directories,
//! reused by the next run. Set-up happens after the fork on both sides:
//! nothing of iceoryx2 crosses the fork.

use crate::harness::{Run, Skip};
use crate::record::Placement;

#[cfg(feature = "iceoryx2")]
use real::{dispatch, Mode};

/// The measurement itself, built with the `iceoryx2` feature (on by default).
#[cfg(feature = "iceoryx2")]
mod real {
    use std::os::fd::AsFd;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant;

    use iceoryx2::port::listener::Listener;
    use iceoryx2::port::notifier::Notifier;
    use iceoryx2::prelude::*;

    use crate::chan;
    use crate::harness::{Run, Skip};

    /// How the two sides wait.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(super) enum Mode {
        /// Busy-wait.
        Poll,
        /// Sleep on an event listener.
        Event,
    }

    /// First byte of the request that ends the server.
    const STOP: u8 = 0xEE;

    fn iox<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> Skip {
        move |e| Skip::new(format!("failed: iceoryx2 {what}: {e:?}"))
    }

    fn io<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> std::io::Error {
        move |e| std::io::Error::other(format!("iceoryx2 {what}: {e:?}"))
    }

    /// A service name no other run uses: the process, and a counter.
    fn unique_name(mode: Mode) -> String {
        static ROUND: AtomicU32 = AtomicU32::new(0);
        let k = ROUND.fetch_add(1, Ordering::Relaxed);
        let m = if mode == Mode::Poll { "poll" } else { "event" };
        format!("ferry-bench/rpc/{}/{k}/{m}", std::process::id())
    }

    /// iceoryx2's built-in defaults (no configuration file is read), with
    /// its files under a directory and a name prefix of their own, both
    /// this user's (`ferry-bench-iceoryx2-UID` in the temporary directory,
    /// made 0700 or checked to be this user's alone, and `ferrybenchUID_`),
    /// so that the benchmark never meets another iceoryx2 user on the
    /// machine, nor another user's files or links where it writes.
    fn config() -> Result<Config, String> {
        let uid = rustix::process::geteuid().as_raw();
        let mut c = Config::default();
        c.global.prefix = FileName::new(format!("ferrybench{uid}_").as_bytes()).map_err(|e| format!("{e:?}"))?;
        let dir = std::env::temp_dir().join(format!("ferry-bench-iceoryx2-{uid}"));
        crate::suites::own_dir(&dir).map_err(|e| format!("iceoryx2's directory {}: {e}", dir.display()))?;
        let root = format!("{}/", dir.display());
        c.global.set_root_path(&Path::new(root.as_bytes()).map_err(|e| format!("{e:?}"))?);
        Ok(c)
    }

    fn node() -> Result<Node<ipc::Service>, String> {
        // Its warnings (a notification to a listener that has just gone, at
        // the end of a round) would garble the table.
        set_log_level(LogLevel::Error);
        NodeBuilder::new()
            .config(&config()?)
            .signal_handling_mode(SignalHandlingMode::Disabled)
            .create::<ipc::Service>()
            .map_err(|e| format!("{e:?}"))
    }

    /// The event pair of one side: it waits on `listener`, wakes the other
    /// with `notifier`.
    struct Events {
        listener: Listener<ipc::Service>,
        notifier: Notifier<ipc::Service>,
    }

    fn events(node: &Node<ipc::Service>, base: &str, mine: &str, theirs: &str) -> Result<Events, String> {
        let open = |suffix: &str| -> Result<_, String> {
            let name: ServiceName = format!("{base}/{suffix}").as_str().try_into().map_err(|e| format!("{e:?}"))?;
            node.service_builder(&name).event().open_or_create().map_err(|e| format!("{e:?}"))
        };
        let l = open(mine)?;
        let n = open(theirs)?;
        Ok(Events {
            listener: l.listener_builder().create().map_err(|e| format!("{e:?}"))?,
            notifier: n.notifier_builder().create().map_err(|e| format!("{e:?}"))?,
        })
    }

    fn server<const N: usize>(name: &str, mode: Mode, ready: impl std::os::fd::AsFd) -> std::io::Result<()> {
        let node = node().map_err(io("node"))?;
        let sname: ServiceName = name.try_into().map_err(io("service name"))?;
        let svc = node.service_builder(&sname).request_response::<[u8; N], [u8; N]>().open_or_create().map_err(io("service"))?;
        let server = svc.server_builder().create().map_err(io("server"))?;
        let ev = match mode {
            Mode::Event => Some(events(&node, name, "to-server", "to-client").map_err(io("events"))?),
            Mode::Poll => None,
        };
        chan::write_all(&ready, &[1])?;
        let reply = [2u8; N];
        let mut req = [0u8; N];
        loop {
            match server.receive().map_err(io("receive"))? {
                Some(active) => {
                    req.copy_from_slice(active.payload());
                    let stop = req[0] == STOP;
                    active.loan_uninit().map_err(io("loan"))?.write_payload(reply).send().map_err(io("send"))?;
                    if let Some(ev) = &ev {
                        ev.notifier.notify().map_err(io("notify"))?;
                    }
                    if stop {
                        return Ok(());
                    }
                }
                None => match &ev {
                    Some(ev) => {
                        ev.listener.blocking_wait_one().map_err(io("wait"))?;
                    }
                    None => std::hint::spin_loop(),
                },
            }
        }
    }

    fn roundtrip<const N: usize>(run: &mut Run<'_>, mode: Mode) -> Result<(), Skip> {
        let name = unique_name(mode);
        let (ready_r, ready_w) = chan::pipe()?;
        let peer = {
            let name = name.clone();
            run.spawn(&[ready_r.as_fd()], move || server::<N>(&name, mode, ready_w))?
        };
        let mut byte = [0u8; 1];
        if !chan::read_exact(&ready_r, &mut byte)? {
            drop(peer);
            return Err(Skip::new("failed: the iceoryx2 server process ended during set-up"));
        }
        let node = node().map_err(iox("node"))?;
        let sname: ServiceName = name.as_str().try_into().map_err(iox("service name"))?;
        let svc = node.service_builder(&sname).request_response::<[u8; N], [u8; N]>().open_or_create().map_err(iox("service"))?;
        let client = svc.client_builder().create().map_err(iox("client"))?;
        let ev = match mode {
            Mode::Event => Some(events(&node, &name, "to-client", "to-server").map_err(iox("events"))?),
            Mode::Poll => None,
        };
        let call = |payload: [u8; N], out: &mut [u8; N]| -> Result<(), Skip> {
            let pending = client.loan_uninit().map_err(iox("loan"))?.write_payload(payload).send().map_err(iox("send"))?;
            if let Some(ev) = &ev {
                ev.notifier.notify().map_err(iox("notify"))?;
            }
            loop {
                if let Some(r) = pending.receive().map_err(iox("receive"))? {
                    out.copy_from_slice(r.payload());
                    return Ok(());
                }
                match &ev {
                    Some(ev) => {
                        ev.listener.blocking_wait_one().map_err(iox("wait"))?;
                    }
                    None => std::hint::spin_loop(),
                }
            }
        };
        let req = [1u8; N];
        let mut rep = [0u8; N];
        for _ in 0..100 {
            call(req, &mut rep)?;
        }
        while run.more() {
            let t = Instant::now();
            call(req, &mut rep)?;
            run.record(t.elapsed());
        }
        if rep != [2u8; N] {
            return Err(Skip::new("failed: the iceoryx2 reply did not arrive"));
        }
        let mut stop = [1u8; N];
        stop[0] = STOP;
        call(stop, &mut rep)?;
        peer.wait()?;
        drop(ev);
        drop(client);
        drop(svc);
        drop(node);
        run.note("service", "iceoryx2 request-response, ipc::Service, default configuration");
        Ok(())
    }

    pub(super) fn dispatch(run: &mut Run<'_>, mode: Mode) -> Result<(), Skip> {
        match run.bytes() {
            8 => roundtrip::<8>(run, mode),
            64 => roundtrip::<64>(run, mode),
            1024 => roundtrip::<1024>(run, mode),
            n => Err(Skip::new(format!("the iceoryx2 peer is built for payloads of 8, 64 and 1024 bytes, not {n}"))),
        }
    }
}

#[cfg(not(feature = "iceoryx2"))]
fn not_built() -> Result<(), Skip> {
    Err(Skip::new("not built: ferry-bench's iceoryx2 feature (on by default) was turned off"))
}

/// `iceoryx2-poll`: both sides busy-wait. Needs two CPUs, like `spin-floor`.
pub fn iceoryx2_poll(run: &mut Run<'_>) -> Result<(), Skip> {
    if run.placement == Placement::SameCore {
        return Err(Skip::new(
            "two busy-waiting processes on one CPU alternate only when the scheduler preempts one; polling needs two CPUs",
        ));
    }
    #[cfg(feature = "iceoryx2")]
    return dispatch(run, Mode::Poll);
    #[cfg(not(feature = "iceoryx2"))]
    not_built()
}

/// `iceoryx2-event`: both sides sleep on an iceoryx2 event listener when
/// nothing has arrived, and notify after sending.
pub fn iceoryx2_event(run: &mut Run<'_>) -> Result<(), Skip> {
    #[cfg(feature = "iceoryx2")]
    return dispatch(run, Mode::Event);
    #[cfg(not(feature = "iceoryx2"))]
    {
        let _ = run;
        not_built()
    }
}
