//! The network part of `ferry names` and `ferry stat` in a `ferry` built
//! without the `net` feature (the default, so that `ferry` links the library
//! alone): when a network server is registered, say how to see its links.

use ferry::Bootstrap;

/// The name `ferry-netd` registers its status port under.
const NAME: &str = "ferry-netd";

/// Says that a network server runs and how to see it, if one does.
fn hint(bs: &mut Bootstrap) {
    if bs.lookup(NAME).is_ok() {
        println!();
        println!("network: a network server is registered as {NAME}; this ferry was built without the `net` feature,");
        println!("  so its links are not shown (install with: cargo install --path crates/ferry-cli --features net)");
    }
}

/// The network part of `ferry names`.
pub fn show_names(bs: &mut Bootstrap) {
    hint(bs);
}

/// The network part of `ferry stat`.
pub fn show_stat(bs: &mut Bootstrap) {
    hint(bs);
}
