//! The engine SPI: what an engine implements — an [`EventBus`](bus::EventBus), a
//! [`StateStore`](state::StateStore) and a [`Registry`](registry::Registry).

pub mod bus;
pub mod registry;
pub mod state;
