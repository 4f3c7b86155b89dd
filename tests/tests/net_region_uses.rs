//! What one local user can make a network node hold by mapping and
//! copying the regions it received by reference: each region is served by
//! an object server of its own in the node, and each mapping and copy
//! costs the node descriptors. A test binary of its own, since it counts
//! the whole process's descriptors.

mod common;

use std::io::BufRead;
use std::time::Duration;

use common::{loopback_node as node, watchdog};
use ferry::{Message, Region, Timeout};
use ferry_net::Identity;

const WAIT: Timeout = Timeout::After(Duration::from_secs(10));


fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Regions the other user is sent.
const REGIONS: usize = 6;

/// Another user (nobody) sent six regions by reference maps each, and has
/// it copied, until refused: the node's descriptors for all of that stay
/// within one budget per user across every region it serves
/// (`node::REGION_USES_PER_USER`), and root still maps a region it is
/// sent. Each region's server had budgets of its own (128 mappings of two
/// descriptors and 128 copies of one each, per user), so a user took the
/// node 384 descriptors further with every region it was sent: 2304 here.
#[test]
fn a_user_mapping_the_peers_regions_takes_the_node_only_its_budget_of_descriptors() {
    if !common::can_play_other_user("a_user_mapping_the_peers_regions_takes_the_node_only_its_budget_of_descriptors") {
        return;
    }
    watchdog("a_user_mapping_the_peers_regions_takes_the_node_only_its_budget_of_descriptors", Duration::from_secs(120), || {
        let (ia, ib) = (Identity::generate("a").unwrap(), Identity::generate("b").unwrap());
        let (a, b) = (node(&ia, &ib, "b"), node(&ib, &ia, "a"));
        b.connect("a", a.local_addr().unwrap()).unwrap();
        let (_collect, mut other, to_other) = common::other_user_handing_its_port(&a, &b, "collect@a", "map-regions", &[&REGIONS.to_string()]);
        let len = ferry_net::frame::MAX_EAGER_REGION + 4096;
        let region = || Region::new(len).unwrap().by_move().unwrap();
        let before = open_fds();
        for _ in 0..REGIONS {
            to_other.send(Message::new(30).with_item(region()), WAIT).unwrap();
        }
        let mut said = std::io::BufReader::new(other.stdout.take().unwrap()).lines();
        let line = said.next().unwrap().unwrap();
        let grown = open_fds().saturating_sub(before);
        println!("the other user {line}; the process's descriptors grew by {grown}");

        // Root, sent a region to a port of its own, still maps it.
        let (mut mine, to_mine) = ferry::port().unwrap();
        b.export("mine", to_mine);
        a.lookup("mine@b").unwrap().send(Message::new(31).with_item(region()), WAIT).unwrap();
        let mut m = mine.recv(WAIT).unwrap();
        let Some(ferry::Item::Send(right)) = m.take_items().pop() else { panic!("root's region did not arrive") };
        let view = ferry_net::RemoteRegion::open(right).unwrap().map().expect("root maps its region");
        drop(view);
        drop(other.stdin.take());
        assert!(other.wait().unwrap().success());
        // Each region costs its server a port, a userfaultfd and an epoll
        // besides: 16 each is generous.
        let most = 2 * ferry_net::node::REGION_USES_PER_USER + 16 * REGIONS;
        assert!(grown <= most, "one user's mappings and copies took the node {grown} descriptors, past {most}: {line}");
    });
}
