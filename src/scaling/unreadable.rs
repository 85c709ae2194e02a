//! Why a reading could not be had, as the reader found it. The core never words a reason from
//! outside itself: it carries the reader's error, typed, to the point where status, an event or
//! a log line renders it for a person. It tells a reason apart from a value and compares two
//! reasons by what they say (a decision is compared as a whole, its reasons included).

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use thiserror::Error;

/// A reader's error, shared (a reading is cloned into the decision's outcome and reasons).
#[derive(Clone)]
pub struct Unreadable(Arc<dyn Error + Send + Sync>);

impl Unreadable {
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }
}

/// The reader's error whole, its sources included.
impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&crate::error_chain::Chain(&*self.0), f)
    }
}

impl fmt::Debug for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Unreadable({:?})", self.0.to_string())
    }
}

impl PartialEq for Unreadable {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}

/// A decision server's count below zero: no fleet has that many replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the decision is a negative replica count ({0})")]
pub struct NegativeCount(pub i32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_renders_and_compares_as_the_error_it_carries() {
        let refused = Unreadable::new(std::io::Error::other("connection refused"));
        assert_eq!(refused.to_string(), "connection refused");
        assert_eq!(refused, refused.clone());
        assert_eq!(
            refused,
            Unreadable::new(std::io::Error::other("connection refused"))
        );
        assert_ne!(refused, Unreadable::new(NegativeCount(-1)));
        // A reader's error is told whole: its sources follow it.
        #[derive(Debug, Error)]
        #[error("cannot reach the server")]
        struct Wrapped(#[source] std::io::Error);
        let wrapped = Unreadable::new(Wrapped(std::io::Error::other("connection refused")));
        assert_eq!(
            wrapped.to_string(),
            "cannot reach the server: connection refused"
        );
        assert_ne!(
            wrapped,
            Unreadable::new(Wrapped(std::io::Error::other("timed out")))
        );
        assert_eq!(
            Unreadable::new(NegativeCount(-3)).to_string(),
            "the decision is a negative replica count (-3)"
        );
    }
}
