//! Peer roles for the port, right and name-service tests.
//!
//! Protocol conventions shared with `tests/tests/processes.rs`: op 99 asks a
//! role to stop; bodies carrying numbers are little-endian `u64`s.

use ferry::{Bootstrap, Item, Message, RecvError, SendError, Timeout};

use crate::Outcome;

/// Runs `role` if this module knows it.
pub fn run(role: &str, args: &[String]) -> Outcome {
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    Some(match role {
        "server" => server(&arg(0)),
        "hold-receive" => hold_receive(&arg(0)),
        "take-receive" => take_receive(&arg(0)),
        "flood" => flood(&arg(0), arg(1).parse().unwrap_or(0), arg(2).parse().unwrap_or(0), &arg(3)),
        "register" => register(&arg(0)),
        "lookup" => lookup(&arg(0)),
        "send-forever" => send_forever(&arg(0)),
        "inherited" => inherited(),
        "inherited-refused" => inherited_refused(),
        "handed-right" => handed_right(),
        "keep-rights" => keep_rights(),
        "ask" => ask(arg(0).parse().unwrap_or(0)),
        "sinks" => sinks(arg(0).parse().unwrap_or(0)),
        "reply-sinks" => reply_sinks(arg(0).parse().unwrap_or(0)),
        "send-to-each" => send_to_each(arg(0).parse().unwrap_or(0)),
        "keep-messages" => keep_messages(arg(0).parse().unwrap_or(0)),
        "fetch-whole" => fetch_whole(arg(0).parse().unwrap_or(0)),
        "map-regions" => map_regions(arg(0).parse().unwrap_or(0)),
        "export-rights" => export_rights(arg(0).parse().unwrap_or(0)),
        "keep-all" => keep_all(),
        _ => return None,
    })
}

type R = Result<(), Box<dyn std::error::Error>>;

fn lookup_retry(bs: &mut Bootstrap, name: &str) -> Result<ferry::SendRight, Box<dyn std::error::Error>> {
    for _ in 0..2000 {
        match bs.lookup(name) {
            Ok(r) => return Ok(r),
            Err(ferry::NameError::NotFound) => std::thread::sleep(std::time::Duration::from_millis(5)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!("{name} never registered").into())
}

/// Registers a port under `name` and answers requests: replies through the
/// reply right with the body reversed and op + 1, and greets every send right
/// a request carries. Stops on op 99.
fn server(name: &str) -> R {
    let (mut rx, tx) = ferry::port()?;
    Bootstrap::connect()?.register(name, &tx)?;
    drop(tx);
    loop {
        let mut m = rx.recv(Timeout::Infinite)?;
        if m.op() == 99 {
            println!("server: stop");
            return Ok(());
        }
        let who = m.sender().ok_or("no credentials")?;
        println!("server: op {} from pid {} ({} bytes, {} items)", m.op(), who.pid, m.body().len(), m.items().len());
        for it in m.take_items() {
            if let Item::Send(s) = it {
                s.send(Message::new(7).with_body(format!("hello from server {}", std::process::id())), Timeout::Infinite)?;
            }
        }
        if let Some(reply) = m.take_reply() {
            let mut body = m.body().to_vec();
            body.reverse();
            reply.send(Message::new(m.op() + 1).with_body(body), Timeout::Infinite)?;
        }
    }
}

/// Gives the test a send right to a fresh port, then blocks receiving on it
/// until killed.
fn hold_receive(name: &str) -> R {
    let mut bs = Bootstrap::connect()?;
    let to_test = lookup_retry(&mut bs, name)?;
    let (mut rx, tx) = ferry::port()?;
    to_test.send(Message::new(1).with_item(tx), Timeout::Infinite)?;
    println!("holding");
    loop {
        match rx.recv(Timeout::Infinite) {
            Ok(m) if m.op() == 99 => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sends the test a send right to its own port, receives a receive right
/// through it, then prints every message received on that right until op 99.
fn take_receive(name: &str) -> R {
    let mut bs = Bootstrap::connect()?;
    let to_test = lookup_retry(&mut bs, name)?;
    let (mut mine, tx) = ferry::port()?;
    to_test.send(Message::new(1).with_item(tx), Timeout::Infinite)?;
    let mut m = mine.recv(Timeout::Infinite)?;
    let Some(Item::Receive(mut taken)) = m.take_items().pop() else { return Err("expected a receive right".into()) };
    println!("took receive right, {} send-once outstanding", taken.send_once_outstanding());
    loop {
        match taken.recv(Timeout::Infinite) {
            Ok(m) if m.op() == 99 => return Ok(()),
            Ok(m) => println!("got {} {}", m.op(), String::from_utf8_lossy(m.body())),
            Err(RecvError::SendOnceDropped) => println!("send-once dropped"),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sends `count` numbered messages (body: id, seq) to `name`, blocking or
/// with a short timeout, and prints the outcome of each.
fn flood(name: &str, count: u64, id: u64, mode: &str) -> R {
    let mut bs = Bootstrap::connect()?;
    let to = lookup_retry(&mut bs, name)?;
    let timeout = if mode == "timed" { Timeout::millis(2) } else { Timeout::Infinite };
    for seq in 0..count {
        let mut body = id.to_le_bytes().to_vec();
        body.extend_from_slice(&seq.to_le_bytes());
        match to.send(Message::new(2).with_body(body), timeout).map_err(SendError::from) {
            Ok(()) => println!("ok {seq}"),
            Err(SendError::Timeout) => println!("timeout {seq}"),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Registers a fresh port under `name`, says so, and waits (op 99 stops).
fn register(name: &str) -> R {
    let (mut rx, tx) = ferry::port()?;
    let mut bs = Bootstrap::connect()?;
    match bs.register(name, &tx) {
        Ok(()) => println!("registered"),
        Err(ferry::NameError::Taken) => {
            println!("taken");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }
    drop(tx);
    loop {
        match rx.recv(Timeout::Infinite) {
            Ok(m) if m.op() == 99 => return Ok(()),
            Ok(_) => {}
            Err(RecvError::NoSenders) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Looks `name` up once and prints `found` or `notfound`.
fn lookup(name: &str) -> R {
    match Bootstrap::connect()?.lookup(name) {
        Ok(_) => println!("found"),
        Err(ferry::NameError::NotFound) => println!("notfound"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Sends to `name` in a loop until the port dies or the process is killed.
fn send_forever(name: &str) -> R {
    let mut bs = Bootstrap::connect()?;
    let to = lookup_retry(&mut bs, name)?;
    println!("sending");
    let mut seq = 0u64;
    loop {
        match to.send(Message::new(3).with_body(seq.to_le_bytes()), Timeout::Infinite).map_err(SendError::from) {
            Ok(()) => seq += 1,
            Err(SendError::PeerDead) => {
                println!("dead name after {seq}");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Takes the send right its parent passed (`ferry::spawn`), and reports
/// through it what a second take says.
fn inherited() -> R {
    let parent = ferry::spawn::inherited()?;
    let again = match ferry::spawn::inherited() {
        Ok(_) => "taken twice".to_string(),
        Err(e) => e.to_string(),
    };
    parent.send(Message::new(1).with_body(format!("again: {again}")), Timeout::Infinite)?;
    Ok(())
}

/// Sends rights through the send right its parent passed (a network
/// proxy, in `net_cor`): first op 10 with two send rights to ports of its
/// own, kept alive; then, once a line arrives on standard input, op 11
/// with one more and a reply right, and prints the answer to that
/// (`answer OP BODY-IN-HEX`), then what the answer carried back
/// (`given back N mine|other`: `mine` when it is one send right, and a
/// message sent on it reaches this process's own third port). Exits when
/// standard input closes.
fn keep_rights() -> R {
    use std::io::BufRead;
    let to = ferry::spawn::inherited()?;
    let mut kept: Vec<_> = (0..3).map(|_| ferry::port()).collect::<Result<_, _>>()?;
    let right = |i: usize| kept[i].1.try_clone();
    to.send(Message::new(10).with_item(right(0)?).with_item(right(1)?), Timeout::Infinite)?;
    println!("sent 10");
    let mut lines = std::io::stdin().lock().lines();
    lines.next().transpose()?;
    let (mut answers, _keep) = ferry::port()?;
    to.send(Message::new(11).with_item(right(2)?).with_reply(answers.make_send_once()?), Timeout::Infinite)?;
    let mut answer = answers.recv(Timeout::After(std::time::Duration::from_secs(30)))?;
    let body: String = answer.body().iter().map(|b| format!("{b:02x}")).collect();
    println!("answer {} {body}", answer.op());
    let back = answer.take_items();
    let mine = match back.as_slice() {
        [Item::Send(s)] => {
            s.send(Message::new(12), Timeout::After(std::time::Duration::from_secs(10)))?;
            kept[2].0.recv(Timeout::After(std::time::Duration::from_secs(10)))?.op() == 12
        }
        _ => false,
    };
    println!("given back {} {}", back.len(), if mine { "mine" } else { "other" });
    // Holds its ports (and so what the far side keeps) until told to go.
    lines.next().transpose()?;
    drop(kept);
    Ok(())
}

/// Makes `n` ports with small queues that it never reads, sends a send
/// right to each through the inherited right (op 20, 32 rights a
/// message), says `sent`, and holds the ports until its standard input
/// ends.
fn sinks(n: usize) -> R {
    let to = ferry::spawn::inherited()?;
    let ports: Vec<_> = (0..n).map(|_| ferry::port_with(ferry::PortOptions { queue_limit: Some(4096) })).collect::<Result<_, _>>()?;
    for some in ports.chunks(32) {
        let m = some.iter().try_fold(Message::new(20), |m, (_, tx)| tx.try_clone().map(|tx| m.with_item(tx)))?;
        to.send(m, Timeout::After(std::time::Duration::from_secs(10)))?;
    }
    say_and_hold("sent", ports)
}

/// Makes `n` send-once rights of its own, sends them through the inherited
/// right (op 24), says `sent`, and never reads what comes on them; holds
/// their receiving ends until its standard input ends.
fn reply_sinks(n: usize) -> R {
    let to = ferry::spawn::inherited()?;
    let (ends, rights): (Vec<_>, Vec<_>) = (0..n).map(|_| ferry::reply_pair()).collect::<Result<Vec<_>, _>>()?.into_iter().unzip();
    let m = rights.into_iter().fold(Message::new(24), |m, r| m.with_item(r));
    to.send(m, Timeout::After(std::time::Duration::from_secs(10)))?;
    say_and_hold("sent", ends)
}

/// Sends a send right to a port of its own through the inherited right
/// (op 21), takes `n` send rights from the messages that port gets, sends
/// one message (op 22) on each, says `sent`, and holds the rights until
/// its standard input ends.
fn send_to_each(n: usize) -> R {
    let to = ferry::spawn::inherited()?;
    let t = Timeout::After(std::time::Duration::from_secs(10));
    let (mut mine, tx) = ferry::port()?;
    to.send(Message::new(21).with_item(tx), t)?;
    let mut rights = Vec::new();
    while rights.len() < n {
        let mut m = mine.recv(t)?;
        rights.extend(m.take_items().into_iter().filter_map(|i| if let Item::Send(s) = i { Some(s) } else { None }));
    }
    for r in &rights {
        r.send(Message::new(22), t)?;
    }
    say_and_hold("sent", rights)
}

/// Sends a send right to a port of its own through the inherited right
/// (op 21), keeps the first `n` messages that port gets, says `kept K`
/// (the items they carried), and holds them until its standard input
/// ends.
fn keep_messages(n: usize) -> R {
    let to = ferry::spawn::inherited()?;
    let t = Timeout::After(std::time::Duration::from_secs(10));
    let (mut mine, tx) = ferry::port()?;
    to.send(Message::new(21).with_item(tx), t)?;
    let kept = (0..n).map(|_| mine.recv(t)).collect::<Result<Vec<_>, _>>()?;
    let said = format!("kept {}", kept.iter().map(|m| m.items().len()).sum::<usize>());
    say_and_hold(&said, kept)
}

/// Prints `said` (the test reads it to know the role got this far), then
/// keeps `held` until standard input ends.
/// Opens the remote region whose server the inherited right names, says
/// `ready`, and at the first line of its standard input fetches it whole
/// `n` times, reading every byte of each copy; says `held N SUM` (SUM the
/// bytes' sum, the same for each copy) and holds the copies until its
/// input ends.
fn fetch_whole(n: usize) -> R {
    use std::io::BufRead;
    let region = ferry_net::RemoteRegion::open(ferry::spawn::inherited()?)?;
    println!("ready");
    std::io::stdin().lock().lines().next().transpose()?;
    let mut copies = Vec::new();
    let mut sum = 0u64;
    for _ in 0..n {
        let view = region.fetch_all()?.map(ferry::MapOptions::lazy().read_only())?;
        sum = view.iter().map(|&b| u64::from(b)).sum();
        copies.push(view);
    }
    say_and_hold(&format!("held {} {sum}", copies.len()), copies)
}

/// Sends a right to a port of its own through the inherited right (op
/// 21), takes `n` messages there each carrying a region received by
/// reference, and maps each region, and has it copied, again and again
/// until refused (at most 1000 times each), keeping every mapping and
/// copy; says `mapped M copied C` and holds them until its input ends.
fn map_regions(n: usize) -> R {
    let to = ferry::spawn::inherited()?;
    let t = Timeout::After(std::time::Duration::from_secs(10));
    let (mut mine, tx) = ferry::port()?;
    to.send(Message::new(21).with_item(tx), t)?;
    let (mut maps, mut copies, mut regions) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let mut m = mine.recv(t)?;
        let Some(Item::Send(right)) = m.take_items().pop() else { return Err("a message without a region".into()) };
        let region = ferry_net::RemoteRegion::open(right)?;
        for _ in 0..1000 {
            match region.map() {
                Ok(view) => maps.push(view),
                Err(_) => break,
            }
        }
        for _ in 0..1000 {
            match region.object().copy() {
                Ok(copy) => copies.push(copy),
                Err(_) => break,
            }
        }
        regions.push(region);
    }
    say_and_hold(&format!("mapped {} copied {}", maps.len(), copies.len()), (maps, copies, regions))
}

/// Sends up to `n` messages through the inherited right, each carrying 63
/// send rights to fresh ports of its own (whose receive rights it keeps)
/// and a reply right, stopping at the first refusal; says `sent S
/// refused: WHY` (or `refused: none`) and holds the ports until its input
/// ends.
fn export_rights(n: usize) -> R {
    let to = ferry::spawn::inherited()?;
    let t = Timeout::After(std::time::Duration::from_secs(10));
    let (mut answers, _keep) = ferry::port()?;
    let (mut ports, mut sent, mut why) = (Vec::new(), 0, String::from("none"));
    for _ in 0..n {
        let mut m = Message::new(40).with_reply(answers.make_send_once()?);
        for _ in 0..63 {
            let (rx, tx) = ferry::port()?;
            ports.push(rx);
            m = m.with_item(Item::Send(tx));
        }
        to.send(m, t)?;
        if let Ok(answer) = answers.recv(Timeout::millis(100)) {
            why = ferry_net::Refusal::of(&answer).map_or_else(|| format!("op {}", answer.op()), |(r, text)| format!("{r:?} {text}"));
            break;
        }
        sent += 1;
    }
    say_and_hold(&format!("sent {sent} refused: {why}"), ports)
}

/// Sends a right to a port of its own through the inherited right (op
/// 21), says `ready`, and keeps every message that arrives there until its
/// input ends.
fn keep_all() -> R {
    use std::io::Read;
    let to = ferry::spawn::inherited()?;
    let (mut mine, tx) = ferry::port()?;
    to.send(Message::new(21).with_item(tx), Timeout::After(std::time::Duration::from_secs(10)))?;
    println!("ready");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        d2.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let mut kept = Vec::new();
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        if let Ok(m) = mine.recv(Timeout::millis(100)) {
            kept.push(m);
        }
    }
    Ok(())
}

fn say_and_hold<T>(said: &str, held: T) -> R {
    use std::io::Read;
    println!("{said}");
    std::io::stdin().read_to_end(&mut Vec::new())?;
    drop(held);
    Ok(())
}

/// Sends operation `op` with a reply right to the inherited right and
/// prints the answer: `answer OP BODY`, the body in hex (a status or any
/// other reply, for the test to decode).
fn ask(op: u32) -> R {
    let to = ferry::spawn::inherited()?;
    let (mut answers, _keep) = ferry::port()?;
    to.send(Message::new(op).with_reply(answers.make_send_once()?), Timeout::After(std::time::Duration::from_secs(10)))?;
    let answer = answers.recv(Timeout::After(std::time::Duration::from_secs(10)))?;
    let body: String = answer.body().iter().map(|b| format!("{b:02x}")).collect();
    println!("answer {} {body}", answer.op());
    Ok(())
}

/// Started with `FERRY_INHERITED_FD` naming its standard input: the take
/// must be refused and standard input left open.
fn inherited_refused() -> R {
    match ferry::spawn::inherited() {
        Err(ferry::spawn::InheritError::NotARight(0)) => {}
        other => return Err(format!("expected NotARight(0), got {other:?}").into()),
    }
    let stdin_open = std::fs::metadata("/proc/self/fd/0").is_ok();
    println!("refused; stdin open: {stdin_open}");
    Ok(())
}

/// Asks the holder of its hand-off filter for a right (twice, to see the
/// second answer too), sends "handed" on each it gets, checks that an
/// ordinary `ioctl` still runs under the filter, and prints what happened:
/// `got`, `none` or `error: ...` per ask, then `ioctl ok`.
fn handed_right() -> Result<(), Box<dyn std::error::Error>> {
    for _ in 0..2 {
        match ferry::process::handed_right() {
            Ok(Some(r)) => {
                r.send(ferry::Message::new(77).with_body(*b"handed"), ferry::Timeout::Infinite)?;
                println!("got");
            }
            Ok(None) => println!("none"),
            Err(e) => println!("error: {e}"),
        }
    }
    let (a, _b) = rustix::pipe::pipe()?;
    rustix::io::ioctl_fionread(&a)?;
    println!("ioctl ok");
    Ok(())
}
