//! What every handler context shares: the accessors of the handled event and agent.

/// Accessors every handler context shares.
macro_rules! context_accessors {
    ($ty:ident $(, $extra:ident)*) => {
        impl<T $(, $extra)*> $ty<T $(, $extra)*> {
            /// The envelope of the event being handled.
            ///
            /// ```
            #[doc = concat!("fn log(ctx: &soorma::", stringify!($ty), ") {")]
            ///     let env = ctx.envelope();
            ///     println!("{} {} from {}", env.id, env.event_type, env.source);
            /// }
            /// ```
            pub fn envelope(&self) -> &::std::sync::Arc<::soorma_common::EventEnvelope> {
                &self.envelope
            }

            /// The event type.
            ///
            /// ```
            #[doc = concat!("fn is_urgent(ctx: &soorma::", stringify!($ty), ") -> bool {")]
            ///     ctx.event_type().ends_with(".urgent")
            /// }
            /// ```
            pub fn event_type(&self) -> &str {
                &self.envelope.event_type
            }

            /// The correlation id, if any.
            ///
            /// ```
            #[doc = concat!("fn trace_key(ctx: &soorma::", stringify!($ty), ") -> String {")]
            ///     ctx.correlation_id().unwrap_or("uncorrelated").to_owned()
            /// }
            /// ```
            pub fn correlation_id(&self) -> Option<&str> {
                self.envelope.correlation_id.as_deref()
            }

            /// The tenant (`"default"` when the event names none).
            ///
            /// ```
            #[doc = concat!("fn settings_key(ctx: &soorma::", stringify!($ty), ") -> soorma::state::StateKey {")]
            ///     soorma::state::StateKey::new("settings", ctx.tenant(), "current")
            /// }
            /// ```
            pub fn tenant(&self) -> &str {
                self.envelope.tenant()
            }

            /// The user, if any.
            ///
            /// ```
            #[doc = concat!("fn greeting(ctx: &soorma::", stringify!($ty), ") -> String {")]
            ///     format!("hello {}", ctx.user_id().unwrap_or("guest"))
            /// }
            /// ```
            pub fn user_id(&self) -> Option<&str> {
                self.envelope.user_id.as_deref()
            }

            /// The session, if any.
            ///
            /// ```
            #[doc = concat!("fn in_session(ctx: &soorma::", stringify!($ty), ", session: &str) -> bool {")]
            ///     ctx.session_id() == Some(session)
            /// }
            /// ```
            pub fn session_id(&self) -> Option<&str> {
                self.envelope.session_id.as_deref()
            }

            /// The handling agent's name.
            ///
            /// ```
            #[doc = concat!("fn log(ctx: &soorma::", stringify!($ty), ") {")]
            ///     println!("{} handles {}", ctx.agent(), ctx.event_type());
            /// }
            /// ```
            pub fn agent(&self) -> &str {
                &self.runtime.name
            }

            /// A bus client that publishes in the context of this event (tenant, user,
            /// session and trace inherited; `source` = this agent).
            ///
            /// ```
            #[doc = concat!("async fn notify(ctx: &soorma::", stringify!($ty), ") -> soorma::Result<()> {")]
            ///     // Carries the tenant, user, session and trace of the handled event.
            ///     ctx.bus().announce("work.started", serde_json::json!({})).await?;
            ///     Ok(())
            /// }
            /// ```
            pub fn bus(&self) -> $crate::protocol::publish::BusClient {
                self.runtime.bus.in_context_of(self.envelope.clone())
            }

            /// The platform.
            ///
            /// ```
            #[doc = concat!("async fn searchers(ctx: &soorma::", stringify!($ty), ") -> soorma::Result<usize> {")]
            ///     let found = ctx.platform().discovery().by_consumed_event("search.requested").await?;
            ///     Ok(found.len())
            /// }
            /// ```
            pub fn platform(&self) -> &$crate::platform::Platform {
                &self.runtime.platform
            }
        }
    };
}
pub(crate) use context_accessors;
