//! When to give up on the edge: once every connection to it has been refused for longer than
//! [`EDGE_DOWN_AFTER`] with no `edge_cut` active, nothing listens any more (`workerd` died and
//! `wrangler dev` with it). Sending on would only add one identical transport error per
//! request to the history (142,913 in a 35-minute run whose edge died of a heap OOM), so the
//! workload stops sending to the edge and the checker reports the death once.
//!
//! A cut never makes the edge refuse connections (the proxy behind it is cut, not the edge),
//! so one active is only a reason to wait: refusals during it do not count.

use crate::history::Micros;
use std::time::Duration;

/// How long an unbroken run of refused connections must last.
pub const EDGE_DOWN_AFTER: Duration = Duration::from_secs(5);

/// How an edge operation ended, as far as the watch cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeReply {
    /// Any HTTP answer: something listens.
    Answered,
    /// The connection was refused: nothing listens.
    Refused,
    /// No answer for another reason (reset, timeout): says nothing either way.
    OtherError,
}

/// The watch over the edge's replies.
#[derive(Clone, Debug)]
pub struct EdgeWatch {
    limit: Micros,
    refused_since: Option<Micros>,
    down: bool,
}

impl EdgeWatch {
    /// A watch that gives up after `limit` of refusals.
    pub fn new(limit: Duration) -> EdgeWatch {
        EdgeWatch { limit: limit.as_micros() as Micros, refused_since: None, down: false }
    }

    /// Takes an edge operation's reply (`start` and `end` on the run's clock). Returns the
    /// start of the run of refusals the first time it has lasted `limit`: the edge is down.
    pub fn reply(&mut self, start: Micros, end: Micros, reply: EdgeReply, cut_active: bool) -> Option<Micros> {
        if self.down {
            return None;
        }
        match reply {
            EdgeReply::Answered => self.refused_since = None,
            EdgeReply::OtherError => {}
            EdgeReply::Refused if cut_active => self.refused_since = None,
            EdgeReply::Refused => {
                let since = *self.refused_since.get_or_insert(start);
                if end.saturating_sub(since) >= self.limit {
                    self.down = true;
                    return Some(since);
                }
            }
        }
        None
    }

    /// Whether the edge was given up on.
    pub fn is_down(&self) -> bool {
        self.down
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    #[test]
    fn only_refusals_for_the_whole_limit_give_the_edge_up() {
        let mut w = EdgeWatch::new(Duration::from_secs(5));
        assert_eq!(w.reply(0, 1000, EdgeReply::Refused, false), None);
        assert_eq!(w.reply(2 * S, 2 * S, EdgeReply::Refused, false), None);
        // A reset or a timeout neither breaks the run nor counts as its end.
        assert_eq!(w.reply(3 * S, 4 * S, EdgeReply::OtherError, false), None);
        assert_eq!(w.reply(5 * S - 1, 5 * S - 1, EdgeReply::Refused, false), None);
        assert_eq!(w.reply(5 * S, 5 * S, EdgeReply::Refused, false), Some(0));
        assert!(w.is_down());
        // Said once.
        assert_eq!(w.reply(9 * S, 9 * S, EdgeReply::Refused, false), None);
    }

    #[test]
    fn an_answer_or_a_cut_starts_the_count_again() {
        let mut w = EdgeWatch::new(Duration::from_secs(5));
        w.reply(0, 0, EdgeReply::Refused, false);
        w.reply(4 * S, 4 * S, EdgeReply::Answered, false);
        assert_eq!(w.reply(6 * S, 6 * S, EdgeReply::Refused, false), None, "an answer at 4 s");
        w.reply(7 * S, 7 * S, EdgeReply::Refused, true);
        assert_eq!(w.reply(10 * S, 10 * S, EdgeReply::Refused, false), None, "a cut at 7 s");
        assert_eq!(w.reply(15 * S, 15 * S, EdgeReply::Refused, false), Some(10 * S));
        assert!(w.is_down());
    }
}
