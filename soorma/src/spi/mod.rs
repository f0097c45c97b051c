//! The engine SPI: what an engine implements — an [`EventBus`](bus::EventBus), a
//! [`StateStore`](state::StateStore) and a [`Registry`](registry::Registry) — and the rule for
//! tenant ids and for envelopes they all apply ([`tenant::validate_tenant`],
//! [`envelope::check_envelope`]).

pub mod bus;
pub mod envelope;
pub mod registry;
pub mod state;
pub mod tenant;
