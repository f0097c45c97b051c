//! Typed requests: a request type states, once, the event it is published as and the type of
//! its reply; the reply's event name follows from the request's ([`reply_event_for`]).

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};

/// A request type: the event it is published as, and what its consumer replies with.
///
/// Derive it (`#[derive(Request)] #[request(event = "...", reply = T)]`) or implement it:
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use schemars::JsonSchema;
///
/// #[derive(Serialize, Deserialize, JsonSchema)]
/// struct Calculate { expression: String }
///
/// #[derive(Serialize, Deserialize, JsonSchema)]
/// struct Calculated { result: f64 }
///
/// impl soorma::Request for Calculate {
///     const EVENT: &'static str = "calculate.requested";
///     type Reply = Calculated;
/// }
///
/// use soorma::Request;
/// assert_eq!(Calculate::reply_event(), "calculate.completed");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a request type",
    label = "not a `soorma::Request`",
    note = "derive it: `#[derive(Request, Serialize, Deserialize, JsonSchema)] #[request(event = \"...\", reply = ReplyType)]`, or implement `soorma::Request` (its event and reply type)",
    note = "for a payload that is not a request type, name the event instead: in the handler attribute (`#[on_task(\"research.requested\")]`), or with `Delegation::new(event, &payload, reply_event)`"
)]
pub trait Request: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static {
    /// The event type the request is published as (and its consumer handles).
    const EVENT: &'static str;
    /// What the consumer replies with.
    type Reply: Serialize + DeserializeOwned + JsonSchema + Send + 'static;

    /// The event the reply is published as: by default `<stem>.completed` for an event
    /// `<stem>.requested`, else `<event>.completed` (see [`reply_event_for`]).
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize, schemars::JsonSchema)] struct Ping;
    /// impl soorma::Request for Ping {
    ///     const EVENT: &'static str = "ping";
    ///     type Reply = String;
    ///     fn reply_event() -> std::borrow::Cow<'static, str> { "pong".into() }
    /// }
    /// # use soorma::Request;
    /// assert_eq!(Ping::reply_event(), "pong");
    /// ```
    fn reply_event() -> Cow<'static, str> {
        Cow::Owned(reply_event_for(Self::EVENT))
    }
}

/// The default reply event of a request event: `<stem>.completed` for `<stem>.requested`,
/// else `<event>.completed`. The registry advertises it as the capability's produced event.
///
/// ```
/// use soorma::reply_event_for;
/// assert_eq!(reply_event_for("calculate.requested"), "calculate.completed");
/// assert_eq!(reply_event_for("sentiment.analyze"), "sentiment.analyze.completed");
/// ```
pub fn reply_event_for(event: &str) -> String {
    match event.strip_suffix(".requested") {
        Some(stem) => format!("{stem}.completed"),
        None => format!("{event}.completed"),
    }
}

/// One request about to be published: its event, payload and reply event.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OutgoingRequest {
    /// The request event.
    pub event: &'static str,
    /// The payload.
    pub data: Value,
    /// The reply event.
    pub reply_event: Cow<'static, str>,
}

impl OutgoingRequest {
    /// The outgoing form of a typed request.
    pub(crate) fn of<R: Request>(request: &R) -> Result<Self> {
        let data =
            serde_json::to_value(request).map_err(|e| Error::serialize("request payload", e))?;
        Ok(Self {
            event: R::EVENT,
            data,
            reply_event: R::reply_event(),
        })
    }
}

/// Requests sent together — one request, a tuple of up to 8, or a `Vec` of one request type
/// (a batch of any size) — whose replies come back as one value: `R::Reply`, the tuple of the
/// replies, or the `Vec` of them, in order.
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// use soorma::{Request, RequestSet};
///
/// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
/// struct Search { q: String }
/// impl Request for Search { const EVENT: &'static str = "search.requested"; type Reply = Vec<String>; }
///
/// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
/// struct Translate { text: String }
/// impl Request for Translate { const EVENT: &'static str = "translate.requested"; type Reply = String; }
///
/// assert_eq!(<(Search, Translate)>::events(), ["search.requested", "translate.requested"]);
/// assert_eq!(<Search as RequestSet>::events(), ["search.requested"]);
/// assert_eq!(<Vec<Search>>::key(), "[search.requested]");
/// ```
pub trait RequestSet: Send + 'static {
    /// The replies: `R::Reply`, or a tuple of the replies.
    type Replies: Send + 'static;

    /// The request events, in order.
    fn events() -> Vec<&'static str>;

    /// The reply events, in order.
    fn reply_events() -> Vec<Cow<'static, str>>;

    /// The requests, ready to publish.
    fn into_requests(self) -> Result<Vec<OutgoingRequest>>;

    /// The key a fan-out of this set is remembered by: its request events, comma-separated.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use soorma::{Request, RequestSet};
    /// # #[derive(Serialize, Deserialize, schemars::JsonSchema)] struct A;
    /// # impl Request for A { const EVENT: &'static str = "a.requested"; type Reply = (); }
    /// # #[derive(Serialize, Deserialize, schemars::JsonSchema)] struct B;
    /// # impl Request for B { const EVENT: &'static str = "b.requested"; type Reply = (); }
    /// assert_eq!(<(A, B)>::key(), "a.requested,b.requested");
    /// ```
    fn key() -> String {
        Self::events().join(",")
    }
}

impl<R: Request> RequestSet for R {
    type Replies = R::Reply;

    fn events() -> Vec<&'static str> {
        vec![R::EVENT]
    }

    fn reply_events() -> Vec<Cow<'static, str>> {
        vec![R::reply_event()]
    }

    fn into_requests(self) -> Result<Vec<OutgoingRequest>> {
        Ok(vec![OutgoingRequest::of(&self)?])
    }
}

/// A batch of requests of one type, any number but at least one; the replies come back as a
/// `Vec`, in the order of the requests.
impl<R: Request> RequestSet for Vec<R> {
    type Replies = Vec<R::Reply>;

    fn events() -> Vec<&'static str> {
        vec![R::EVENT]
    }

    fn reply_events() -> Vec<Cow<'static, str>> {
        vec![R::reply_event()]
    }

    fn into_requests(self) -> Result<Vec<OutgoingRequest>> {
        if self.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "an empty batch of `{}` requests: there would be no reply to wait for",
                R::EVENT
            )));
        }
        self.iter().map(OutgoingRequest::of).collect()
    }

    /// `[<event>]`: a batch is told apart from a single request of the same type.
    fn key() -> String {
        format!("[{}]", R::EVENT)
    }
}

macro_rules! request_tuple {
    ($($r:ident $v:ident),+) => {
        impl<$($r: Request),+> RequestSet for ($($r,)+) {
            type Replies = ($($r::Reply,)+);

            fn events() -> Vec<&'static str> {
                vec![$($r::EVENT),+]
            }

            fn reply_events() -> Vec<Cow<'static, str>> {
                vec![$($r::reply_event()),+]
            }

            fn into_requests(self) -> Result<Vec<OutgoingRequest>> {
                let ($($v,)+) = self;
                Ok(vec![$(OutgoingRequest::of(&$v)?),+])
            }
        }
    };
}

request_tuple!(A a);
request_tuple!(A a, B b);
request_tuple!(A a, B b, C c);
request_tuple!(A a, B b, C c, D d);
request_tuple!(A a, B b, C c, D d, E e);
request_tuple!(A a, B b, C c, D d, E e, F f);
request_tuple!(A a, B b, C c, D d, E e, F f, G g);
request_tuple!(A a, B b, C c, D d, E e, F f, G g, H h);
