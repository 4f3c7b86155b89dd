//! The network server's part of `ferry names` and `ferry stat`: links and
//! their state, remote names and proxies, bytes fetched on demand, asked of
//! `ferry-netd` through its status port (`ferry_net::status`), which shows
//! each user only what is theirs or public.

use ferry::Bootstrap;
use ferry_net::status::{self, Status};

/// The status of the network server registered with `bs`, if one is.
fn status(bs: &mut Bootstrap) -> Option<Result<Status, String>> {
    let right = bs.lookup(status::NAME).ok()?;
    Some(status::query(&right).map_err(|e| e.to_string()))
}

/// The network part of `ferry names`, if a network server is registered.
pub fn show_names(bs: &mut Bootstrap) {
    match status(bs) {
        Some(Ok(st)) => print_names(&st),
        Some(Err(e)) => eprintln!("ferry names: the network server did not answer: {e}"),
        None => {}
    }
}

/// The network part of `ferry stat`, if a network server is registered.
pub fn show_stat(bs: &mut Bootstrap) {
    match status(bs) {
        Some(Ok(st)) => print_stat(&st),
        Some(Err(e)) => eprintln!("ferry stat: the network server did not answer: {e}"),
        None => {}
    }
}

/// Prints the links and remote names (for `ferry names`).
fn print_names(st: &Status) {
    println!();
    println!("network (ferry-netd):");
    for l in &st.links {
        if st.full {
            println!("  link to {:<16} {:<5} {:>4} proxies {:>4} exports", l.peer, if l.up { "up" } else { "down" }, l.imports, l.exports);
        } else {
            println!("  link to {:<16} {}", l.peer, if l.up { "up" } else { "down" });
        }
    }
    if st.links.is_empty() {
        println!("  (no links)");
    }
    for n in &st.imports {
        let host = n.rsplit_once('@').map_or("", |(_, h)| h);
        let up = st.links.iter().any(|l| l.peer == host && l.up);
        println!("  remote name {n:<28} proxy to host {host} ({})", if up { "link up" } else { "link down: a dead name" });
    }
    for n in &st.exports {
        println!("  exported     {n:<28} (trusted peers may look it up)");
    }
    if !st.full {
        println!("  (names and counters are shown to the daemon's own user only)");
    }
}

/// Prints links with traffic and the copy-on-reference counters (for
/// `ferry stat`).
fn print_stat(st: &Status) {
    println!();
    println!("network (ferry-netd):");
    for l in &st.links {
        if st.full {
            println!(
                "  link to {:<16} {:<5} proxies {:>4}  exports {:>4}  regions sent {:>3} / mapped here {:>3}  wire {} B out, {} B in",
                l.peer,
                if l.up { "up" } else { "down" },
                l.imports,
                l.exports,
                l.regions_out,
                l.regions_in,
                l.wire_sent,
                l.wire_received
            );
            println!(
                "  {:<24} {} of its streams waiting for credit (ports there not reading), windows grown {} B here",
                "",
                l.streams_waiting,
                l.window_growth
            );
        } else {
            println!("  link to {:<16} {}", l.peer, if l.up { "up" } else { "down" });
        }
    }
    for u in &st.users {
        println!(
            "  user {:<6} at {:<16} {:>5} rights held there, {:>3} regions kept for it (per-user budgets)",
            u.uid, u.peer, u.rights, u.regions
        );
    }
    if st.full {
        let t = &st.stats;
        println!(
            "  fetched on demand {} B in {} fetches; served {} B; regions by reference: {} sent, {} received",
            t.bytes_fetched, t.fetches, t.bytes_served, t.regions_sent, t.regions_received
        );
        println!(
            "  handshakes with hosts asking to link: {} started, {} ignored (too many at once or too often), {} asked to prove their address",
            t.handshakes, t.handshakes_turned_away, t.address_checks
        );
    }
}
