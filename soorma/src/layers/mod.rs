//! The four layers, each adding its own handler constructors, context and failure policy on
//! top of the runtime; no layer imports another.

pub(crate) mod event;
pub(crate) mod planner;
pub(crate) mod tool;
pub(crate) mod worker;
