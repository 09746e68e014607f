//! Prints the public API of the crate whose rustdoc JSON is the first argument, one item
//! a line, sorted, without blanket and auto-trait impls (they follow from the types).
//! scripts/check-public-api.sh builds the JSON and compares the output with
//! docs/public-api.txt.

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(json) = std::env::args_os().nth(1) else {
        eprintln!("usage: modelzip-public-api RUSTDOC_JSON");
        return ExitCode::FAILURE;
    };
    let api = match public_api::Builder::from_rustdoc_json(&json)
        .omit_blanket_impls(true)
        .omit_auto_trait_impls(true)
        .omit_auto_derived_impls(true)
        .build()
    {
        Ok(api) => api,
        Err(e) => {
            eprintln!(
                "modelzip-public-api: cannot read {}: {e}",
                json.to_string_lossy()
            );
            return ExitCode::FAILURE;
        }
    };
    for item in api.items() {
        println!("{item}");
    }
    ExitCode::SUCCESS
}
