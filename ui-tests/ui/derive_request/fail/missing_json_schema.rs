// The request type derives everything but `JsonSchema`: one error, at the type, naming it.
use serde::{Deserialize, Serialize};
use soorma::Request;

#[derive(Request, Serialize, Deserialize)]
#[request(event = "shout.requested", reply = String)]
struct Shout {
    text: String,
}

fn main() {}
