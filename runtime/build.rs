//! Generates the C header for the `dyncc_*` API with cbindgen into
//! `OUT_DIR/dyncc.h`. The committed `include/dyncc.h` is compared with it by
//! the `header_is_current` test; nothing here writes into the source tree.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("dyncc.h");
    println!("cargo:rerun-if-changed=src/capi.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .expect("runtime/cbindgen.toml is not a valid cbindgen configuration");
    // Only the C API file: NCCL's types (src/ffi.rs) stay out of the header.
    match cbindgen::Builder::new()
        .with_src(dir.join("src/capi.rs"))
        .with_config(config)
        .generate()
    {
        Ok(bindings) => {
            bindings.write_to_file(&out);
        }
        Err(e) => {
            // Do not fail the plugin build over the header: the drift test
            // fails with this message instead.
            println!("cargo:warning=cbindgen could not generate dyncc.h: {e}");
            std::fs::write(&out, format!("/* cbindgen failed: {e} */\n")).unwrap();
        }
    }
}
