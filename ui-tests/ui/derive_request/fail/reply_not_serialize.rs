// The reply type is not `Serialize`: one error, at the reply type.
use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::Request;

#[derive(Deserialize, JsonSchema)]
struct Loud {
    text: String,
}

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "shout.requested", reply = Loud)]
struct Shout {
    text: String,
}

fn main() {}
