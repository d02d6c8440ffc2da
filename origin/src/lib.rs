//! bloomgate origin: answers lookups the edge cannot, owns the shared filter in Redis and
//! the write path into Cassandra. Built out in its own issue.
#![forbid(unsafe_code)]
