fn main() {
    println!("cri-bridge {}", env!("CARGO_PKG_VERSION"));
}
