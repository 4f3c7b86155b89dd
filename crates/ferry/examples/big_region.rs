//! Sends 256 MiB by value from one process to another without copying it:
//! the parent fills a region, sends it by copy, and keeps writing its own
//! copy; the child maps the region, checks every word, writes its own copy,
//! and replies with what it saw. Neither sees the other's writes.
//!
//! Run: `cargo run --release -p ferry --example big_region`

use std::process::Command;
use std::time::Instant;

use ferry::region::{MapOptions, Region};
use ferry::{Bootstrap, Item, Message, Timeout};

const LEN: usize = 256 << 20;
const NAME: &str = "big-region-example";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("child") {
        return child();
    }
    // A private name service for this run, on a thread of this process;
    // the child is told where through its environment.
    let dir = std::env::temp_dir().join(format!("ferry-big-region-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut names = Bootstrap::private(&dir)?;
    let (mut replies, reply_to) = ferry::port()?;
    names.register(NAME, &reply_to)?;

    let mut child = Command::new(std::env::current_exe()?)
        .arg("child")
        .env("FERRY_BOOTSTRAP", names.path())
        .env("FERRY_NO_AUTOSTART", "1")
        .spawn()?;
    let mut hello = replies.recv(Timeout::Infinite)?;
    let Some(Item::Send(to_child)) = hello.take_items().pop() else { return Err("child sent no right".into()) };

    let t = Instant::now();
    let mut r = Region::new(LEN)?;
    for (i, w) in r.as_mut_slice_of::<u64>().iter_mut().enumerate() {
        *w = i as u64;
    }
    let filled = t.elapsed();
    let huge_after_fill = r.huge_bytes_mapped();
    let t = Instant::now();
    let before = ferry::counters::snapshot();
    to_child.send(Message::new(1).with_item(r.by_copy()?), Timeout::Infinite)?;
    let sent = t.elapsed();
    // Our later writes stay ours.
    r.as_mut_slice_of::<u64>()[0] = u64::MAX;
    let reply = replies.recv(Timeout::Infinite)?;
    let round = t.elapsed();
    child.wait()?;
    let d = ferry::counters::snapshot().since(&before);
    println!("parent: filled {} MiB in {filled:?}; send took {sent:?}; reply after {round:?}", LEN >> 20);
    println!("child: {}", String::from_utf8_lossy(reply.body()));
    println!(
        "parent: bytes copied by ferry: {}; shmem huge-page policy {:?}; {} MiB mapped with huge pages after filling",
        d.bytes_copied,
        ferry::region::shmem_huge_pages(),
        huge_after_fill >> 20
    );
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

fn child() -> Result<(), Box<dyn std::error::Error>> {
    let parent = Bootstrap::connect()?.lookup(NAME)?;
    let (mut rx, me) = ferry::port()?;
    parent.send(Message::new(0).with_item(me), Timeout::Infinite)?;
    let mut m = rx.recv(Timeout::Infinite)?;
    let Some(Item::Region(r)) = m.take_items().pop() else { return Err("no region".into()) };
    let t = Instant::now();
    let mut v = r.map(MapOptions::lazy())?;
    let words = v.as_slice_of::<u64>();
    let ok = words.iter().enumerate().all(|(i, &w)| w == i as u64);
    let checked = t.elapsed();
    v.as_mut_slice_of::<u64>().expect("by-value regions map writable")[1] = 0; // copies one page, privately
    let msg = format!(
        "mapped {} MiB, every word {} (read in {checked:?}; {} MiB mapped with huge pages)",
        v.len() >> 20,
        if ok { "intact" } else { "WRONG" },
        v.huge_bytes_mapped() >> 20
    );
    parent.send(Message::new(2).with_body(msg), Timeout::Infinite)?;
    if ok { Ok(()) } else { Err("corrupt region".into()) }
}
