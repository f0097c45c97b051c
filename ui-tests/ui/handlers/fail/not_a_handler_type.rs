// A type that is not an annotated function says so.
fn main() {
    let _ = soorma::handlers![String];
}
