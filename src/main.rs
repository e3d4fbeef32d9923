//! The `gleaner` binary: a thin shell over the library's CLI.

fn main() {
    println!("gleaner");
}
