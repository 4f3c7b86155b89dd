//! ferry benchmark suites (filled in by the bench harness).
