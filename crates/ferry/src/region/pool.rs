//! Region pools: fresh regions allocated and populated ahead of use, on a
//! thread of their own, so that a sender producing frames by value finds
//! every page already there.
//!
//! A page of a fresh region costs far more the first time it is touched
//! (allocated, zeroed, mapped) than a copy of it does, and a by-value region
//! can never be written again once sent: its memfd is sealed against
//! writes for good, which is what lets any receiver trust it. So the pages
//! of a released frame cannot come back to the sender; every frame needs
//! fresh ones. What a [`RegionPool`] changes is *when* they are made: a
//! filler thread keeps a few regions of one size allocated and mapped
//! ([`RegionOptions::populate`]), and [`RegionPool::take`] hands out one that
//! is ready. Each is an ordinary [`Region`], fresh and zeroed, that nobody
//! else has ever seen; it is sent by copy or by move as usual, with every
//! by-value guarantee intact.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::{Region, RegionError, RegionOptions};

#[derive(Debug, Default)]
struct State {
    /// Populated regions ready to take, oldest first.
    ready: VecDeque<Region>,
    /// The pool is being dropped: the filler stops.
    stop: bool,
    /// The filler has ended (it could not make a region, or the pool is
    /// being dropped): `take` makes its own, reporting the error if that
    /// fails too.
    failed: bool,
    /// Takes that found nothing ready.
    misses: u64,
}

#[derive(Debug)]
struct Shared {
    len: usize,
    depth: usize,
    opts: RegionOptions,
    state: Mutex<State>,
    /// Signalled when a region is taken (the filler may go on) and when one
    /// is ready (a waiting taker may go on).
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The filler thread's loop: keep `depth` regions ready until told to
    /// stop.
    fn fill(&self) {
        // However the thread ends (stopped, failed, or a panic), takers
        // waiting for it go on and make their own.
        struct Done<'a>(&'a Shared);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.lock().failed = true;
                self.0.changed.notify_all();
            }
        }
        let _done = Done(self);
        loop {
            {
                let mut s = self.lock();
                while !s.stop && s.ready.len() >= self.depth {
                    s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
                }
                if s.stop {
                    return;
                }
            }
            let made = Region::with_options(self.len, self.opts);
            let mut s = self.lock();
            match made {
                Ok(r) => s.ready.push_back(r),
                Err(_) => return,
            }
            self.changed.notify_all();
        }
    }
}

/// Fresh regions of one size, allocated and populated ahead of use by a
/// thread of the pool's own.
///
/// ```
/// use ferry::region::{MapOptions, RegionOptions, RegionPool};
/// use ferry::{Item, Message, Timeout};
/// let (mut rx, tx) = ferry::port()?;
/// let pool = RegionPool::new(4 << 20, 2, RegionOptions::for_len(4 << 20))?;
/// for frame in 0..3u8 {
///     let mut r = pool.take()?; // every page already mapped, all zeros
///     r.as_mut_slice().fill(frame);
///     tx.send(Message::new(1).with_item(r.by_move()?), Timeout::Infinite)?;
///     let mut m = rx.recv(Timeout::Infinite)?;
///     let Some(Item::Region(inc)) = m.take_items().pop() else { unreachable!() };
///     assert!(inc.map(MapOptions::lazy())?.iter().all(|&b| b == frame));
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The pool belongs to the process that made it: a child forked while it
/// lives has no filler thread and must not use it.
#[derive(Debug)]
pub struct RegionPool {
    shared: Arc<Shared>,
    filler: Option<JoinHandle<()>>,
}

impl RegionPool {
    /// A pool of regions of `len` bytes made with `opts` (populated
    /// whatever `opts.populate` says), keeping `depth` (at least one) ready.
    /// The filler thread starts at once.
    ///
    /// # Errors
    /// [`RegionError::Alloc`] when the thread cannot be started.
    pub fn new(len: usize, depth: usize, opts: RegionOptions) -> Result<RegionPool, RegionError> {
        let shared = Arc::new(Shared {
            len,
            depth: depth.max(1),
            opts: opts.populated(),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let filler = std::thread::Builder::new()
            .name("ferry-region-pool".into())
            .spawn(move || s.fill())
            .map_err(RegionError::Alloc)?;
        Ok(RegionPool { shared, filler: Some(filler) })
    }

    /// A fresh, zeroed, populated region of the pool's size: one that is
    /// ready, else the next one the filler makes (waiting for it; counted
    /// in [`misses`](Self::misses)), or, if the filler could not make one,
    /// one made here and now.
    ///
    /// # Errors
    /// [`RegionError::Alloc`] when a region has to be made here and cannot be.
    pub fn take(&self) -> Result<Region, RegionError> {
        let sh = &*self.shared;
        {
            let mut s = sh.lock();
            let mut missed = false;
            loop {
                if let Some(r) = s.ready.pop_front() {
                    drop(s);
                    sh.changed.notify_all();
                    return Ok(r);
                }
                if !missed {
                    missed = true;
                    s.misses += 1;
                }
                // Nothing ready: the filler is making one (or is about to:
                // it never idles with fewer than `depth` ready), unless it
                // has failed.
                if s.failed || s.stop {
                    break;
                }
                s = sh.changed.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
        Region::with_options(sh.len, sh.opts)
    }

    /// Length of every region of the pool.
    pub fn region_len(&self) -> usize {
        self.shared.len
    }

    /// How many regions the filler keeps ready.
    pub fn depth(&self) -> usize {
        self.shared.depth
    }

    /// Regions ready to take now.
    pub fn ready(&self) -> usize {
        self.shared.lock().ready.len()
    }

    /// Takes that found no region ready (and waited for the filler, or
    /// made their own if it had failed): the pool is not keeping up.
    pub fn misses(&self) -> u64 {
        self.shared.lock().misses
    }
}

impl Drop for RegionPool {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(t) = self.filler.take() {
            let _ = t.join();
        }
        // The ready regions go with `shared`: their memfds are closed and
        // their mappings removed.
        self.shared.lock().ready.clear();
    }
}
