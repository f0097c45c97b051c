// `#[derive(Request)]`: structs and enums, the default and an overridden reply event, generic
// requests, and the trait's items.
use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::prelude::*;

#[derive(Serialize, Deserialize, JsonSchema)]
struct Sentiment(f64);

/// Scores the sentiment of a text.
#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "sentiment.analyze", reply = Sentiment)]
struct AnalyzeSentiment {
    text: String,
}

// An enum, an overridden reply event, and the attribute split in two.
#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "order.place", reply_event = "order.placed")]
#[request(reply = u64)]
enum PlaceOrder {
    Book { isbn: String },
    GiftCard { amount: u32 },
}

// `<stem>.requested` replies on `<stem>.completed`; a unit reply.
#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "cache.clear.requested", reply = ())]
struct ClearCache;

// A generic request: a request for the instantiations that serialize.
#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "page.requested", reply = Vec<T>)]
struct Page<T> {
    offset: usize,
    #[serde(skip)]
    _item: std::marker::PhantomData<T>,
}

fn assert_request<R: Request>() {}

fn main() {
    assert_eq!(AnalyzeSentiment::EVENT, "sentiment.analyze");
    assert_eq!(AnalyzeSentiment::reply_event(), "sentiment.analyze.completed");
    let _: Option<<AnalyzeSentiment as Request>::Reply> = Some(Sentiment(0.5));

    assert_eq!(PlaceOrder::EVENT, "order.place");
    assert_eq!(PlaceOrder::reply_event(), "order.placed");
    let _: <PlaceOrder as Request>::Reply = 7_u64;

    assert_eq!(ClearCache::reply_event(), "cache.clear.completed");

    assert_request::<Page<String>>();
    assert_eq!(<Page<u8> as Request>::EVENT, "page.requested");
    let _: <Page<u8> as Request>::Reply = vec![1_u8];

    let _ = (
        AnalyzeSentiment { text: String::new() },
        PlaceOrder::Book { isbn: String::new() },
        PlaceOrder::GiftCard { amount: 1 },
        Page::<u8> { offset: 0, _item: std::marker::PhantomData },
    );
}
