//! Memory objects backed by user-level pagers (userfaultfd).
