//! Compiles `proto/hetsched.proto` with protox (pure Rust, no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/hetsched.proto");
    let fds = protox::compile(["hetsched.proto"], ["proto"])?;
    tonic_prost_build::configure()
        // Read-side messages also serialise to JSON for `--output json`.
        .type_attribute(".hetsched.v1", "#[derive(serde::Serialize)]")
        .compile_fds(fds)?;
    Ok(())
}
