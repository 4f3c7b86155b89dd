//! `ferry-bench`: the benchmark suites and the machine probe as a program of
//! their own, so that `ferry` links the library alone. `ferry bench …` and
//! `ferry probe …` run it; it can also be run directly
//! (`ferry-bench bench port --quick`). Everything is in [`ferry_bench::cli`].

fn main() -> std::process::ExitCode {
    ferry_bench::cli::main()
}
