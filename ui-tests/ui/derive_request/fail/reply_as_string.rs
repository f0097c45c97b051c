use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::Request;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "shout.requested", reply = "String")]
struct Shout {
    text: String,
}

fn main() {}
