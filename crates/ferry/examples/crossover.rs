//! Measures, on this machine, the payload size from which sending data that
//! sits in ordinary memory is cheaper copied once into a region than copied
//! inline through the socket, the number `ferry::region::auto` uses.
//!
//! Run: `cargo run --release -p ferry --example crossover`

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let c = ferry::region::auto::measure(41)?;
    println!("{:>8} {:>12} {:>12}", "bytes", "inline_ns", "region_ns");
    for (size, inline, region) in &c.samples {
        println!("{size:>8} {inline:>12} {region:>12}");
    }
    if c.bytes > ferry::region::auto::INLINE_CAP {
        println!("crossover: none below the inline cap of {} bytes (inline always wins)", ferry::region::auto::INLINE_CAP);
    } else {
        println!("crossover: {} bytes", c.bytes);
    }
    Ok(())
}
