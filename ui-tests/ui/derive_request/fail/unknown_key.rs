use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::Request;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "shout.requested", reply = String, topic = "action-requests")]
struct Shout {
    text: String,
}

fn main() {}
