//! The agent runtime: erased handlers (with the failure policy and start hook their layer
//! sets), extractors, dispatch of deliveries, and the agent builder. It knows no layer.

pub(crate) mod agent;
pub(crate) mod cancel;
pub(crate) mod context;
pub(crate) mod definition;
pub(crate) mod dispatch;
pub(crate) mod extract;
pub(crate) mod group;
pub(crate) mod handler;
pub(crate) mod service;
