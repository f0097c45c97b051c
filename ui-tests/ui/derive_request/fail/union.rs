use soorma::Request;

#[derive(Request)]
#[request(event = "bits.requested", reply = u8)]
union Bits {
    byte: u8,
    flag: bool,
}

fn main() {}
