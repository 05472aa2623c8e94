//! Compiles `proto/cluster.proto` into the gRPC client and server code (tonic, prost),
//! parsing it with protox so that no `protoc` binary is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/cluster.proto");
    let fds = protox::compile(["proto/cluster.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
