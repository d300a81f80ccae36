//! Compiles `proto/hetsched.proto` with protox (pure Rust, no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/hetsched.proto");
    let fds = protox::compile(["hetsched.proto"], ["proto"])?;
    tonic_prost_build::configure()
        // Read-side messages also serialise to JSON for `--output json`.
        .type_attribute(".hetsched.v1", "#[derive(serde::Serialize)]")
        // Topology statuses are built as JSON documents by the server's topology kind and
        // read into these messages at the service edge (issue 16).
        .type_attribute(
            ".hetsched.v1.TopologyStatus",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(
            ".hetsched.v1.ControllerComputation",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(
            ".hetsched.v1.ControllerStatus",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(
            ".hetsched.v1.RescheduleRecord",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(
            ".hetsched.v1.NodeLoad",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(
            ".hetsched.v1.PairRate",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(
            ".hetsched.v1.ExecutorStatus",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(
            ".hetsched.v1.ExecutorPlacement",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .type_attribute(
            ".hetsched.v1.TopologyWorkerStatus",
            "#[derive(serde::Deserialize)] #[serde(default)]",
        )
        .compile_fds(fds)?;
    Ok(())
}
