//! userfaultfd: registering ranges and resolving their faults.
