//! Which attempts to link a node lets start a TLS handshake.
//!
//! Anyone who can reach a node's address may try to link, and each
//! handshake costs the node a key exchange and a signature before it can
//! tell whether the peer is trusted (the client's certificate comes late in
//! the handshake). Without a bound, one host could keep a node busy with
//! handshakes it knows will be refused, and a flood of packets with forged
//! source addresses could make it hold state for each. So:
//!
//! - past [`CHECK_ADDRESSES_FROM`] handshakes at once, an attempt from an
//!   address not yet proven is first asked to prove it (a QUIC Retry, which
//!   costs the node no state: a forged address never answers);
//! - one address may have [`PER_ADDRESS`] handshakes going at once, and
//!   start [`BURST`] at a time and [`PER_SECOND`] a second after that;
//! - the node has at most [`AT_ONCE`] handshakes going.
//!
//! An attempt past a bound is ignored (its packets dropped, as if the node
//! were not there), which costs its sender a timeout and the node nothing.
//! Trusted peers link once and keep the link, and redial with back-off, so
//! none of the bounds is near what they need.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Handshakes a node has going at once, from every address.
pub const AT_ONCE: usize = 128;
/// Handshakes going at once from one address.
pub const PER_ADDRESS: usize = 8;
/// Handshakes one address may start at a time before it is held to
/// [`PER_SECOND`].
pub const BURST: f64 = 64.0;
/// Handshakes one address may start a second, over time.
pub const PER_SECOND: f64 = 16.0;
/// Handshakes going at once past which an unproven address is asked to
/// prove it first.
pub const CHECK_ADDRESSES_FROM: usize = 16;
/// Addresses remembered at once; past it (after forgetting the idle ones),
/// a new address is turned away.
const ADDRESSES: usize = 4096;

/// What to do with one attempt.
#[derive(Debug)]
pub enum Admit {
    /// Start the handshake; the ticket counts it until it is dropped.
    Go(Ticket),
    /// Ask the address to prove it first (a QUIC Retry).
    Check,
    /// Ignore the attempt.
    No,
}

#[derive(Debug)]
struct Address {
    /// Handshakes it may start now (refilled at [`PER_SECOND`]).
    tokens: f64,
    last: Instant,
    going: usize,
}

#[derive(Debug, Default)]
struct State {
    going: usize,
    addresses: HashMap<IpAddr, Address>,
}

/// The bounds of one node.
#[derive(Debug, Default)]
pub struct Gate {
    state: Arc<Mutex<State>>,
}

/// One admitted handshake, counted until dropped.
#[derive(Debug)]
pub struct Ticket {
    state: Arc<Mutex<State>>,
    ip: IpAddr,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.going = st.going.saturating_sub(1);
        if let Some(a) = st.addresses.get_mut(&self.ip) {
            a.going = a.going.saturating_sub(1);
        }
    }
}

impl Gate {
    /// Decides on an attempt from `ip`; `proven` says whether its address
    /// was proven already (by a Retry), `may_check` whether it may still be
    /// asked to.
    pub fn admit(&self, ip: IpAddr, proven: bool, may_check: bool) -> Admit {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.going >= AT_ONCE {
            return Admit::No;
        }
        if st.going >= CHECK_ADDRESSES_FROM && !proven && may_check {
            return Admit::Check;
        }
        if !st.addresses.contains_key(&ip) && st.addresses.len() >= ADDRESSES {
            // Forget the addresses with nothing going whose budget is full
            // again: they are as new.
            st.addresses.retain(|_, a| a.going > 0 || a.tokens + now.duration_since(a.last).as_secs_f64() * PER_SECOND < BURST);
            if st.addresses.len() >= ADDRESSES {
                return Admit::No;
            }
        }
        let a = st.addresses.entry(ip).or_insert(Address { tokens: BURST, last: now, going: 0 });
        a.tokens = (a.tokens + now.duration_since(a.last).as_secs_f64() * PER_SECOND).min(BURST);
        a.last = now;
        if a.going >= PER_ADDRESS || a.tokens < 1.0 {
            return Admit::No;
        }
        a.tokens -= 1.0;
        a.going += 1;
        st.going += 1;
        Admit::Go(Ticket { state: self.state.clone(), ip })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_is_held_to_its_bounds_and_others_are_not() {
        let g = Gate::default();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let mut going: Vec<Ticket> = (0..PER_ADDRESS)
            .map(|_| match g.admit(ip, true, false) {
                Admit::Go(t) => t,
                a => panic!("{a:?}"),
            })
            .collect();
        assert!(matches!(g.admit(ip, true, false), Admit::No), "a fifth at once from one address");
        assert!(matches!(g.admit(other, true, false), Admit::Go(_)), "another address");
        going.clear();
        // The burst is spent after BURST starts, however quickly each ends.
        let mut started = PER_ADDRESS;
        while let Admit::Go(_) = g.admit(ip, true, false) {
            started += 1;
            assert!(started <= BURST as usize + 1, "past the burst");
        }
        assert!(started >= BURST as usize, "{started}");
    }

    #[test]
    fn unproven_addresses_are_asked_to_prove_them_when_busy() {
        let g = Gate::default();
        let _going: Vec<Ticket> = (0..CHECK_ADDRESSES_FROM)
            .map(|i| match g.admit(IpAddr::from([192, 0, 2, i as u8]), false, true) {
                Admit::Go(t) => t,
                a => panic!("{a:?}"),
            })
            .collect();
        let ip: IpAddr = "198.51.100.1".parse().unwrap();
        assert!(matches!(g.admit(ip, false, true), Admit::Check));
        assert!(matches!(g.admit(ip, true, false), Admit::Go(_)), "once proven");
    }
}
