//! bloomgate edge worker. Built out in its own issue.
