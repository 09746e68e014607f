//! `modelzip show`: every param and updater array of a tag.

use super::common::{TagArgs, tag_err, tensor_json};
use super::output::{clean, print, print_json};
use super::{CliError, Outcome};
use serde_json::{Value, json};

/// Show each parameter and updater array of a tag: name, dtype, dims, LoD, the
/// entry it is stored in, whether it is shared and from which tag, and the SHA-256
/// of its data.
///
/// Example:
///   modelzip show model.zip --tag int8
///   modelzip show model.zip --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    input: TagArgs,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = args.input.open()?;
    let tag = args.input.pick(&archive)?;
    let mut params = Vec::new();
    for p in tag.params() {
        let data = tag.tensor(&p.location).map_err(tag_err(tag.name()))?;
        params.push(tensor_json(Some(&p.name), &p.location, &data.view()));
    }
    let mut updater = Vec::new();
    for u in tag.updater() {
        let mut arrays = Vec::new();
        for loc in &u.arrays {
            let data = tag.tensor(loc).map_err(tag_err(tag.name()))?;
            arrays.push(tensor_json(None, loc, &data.view()));
        }
        updater.push(json!({"name": u.name, "arrays": arrays}));
    }
    if args.json {
        let doc = json!({"tag": tag.name(), "params": params, "updater": updater});
        return print_json(&doc).map(|_| Outcome::Success);
    }
    let mut out = format!(
        "tag {}: {} params, {} updater entries\n",
        clean(tag.name()),
        params.len(),
        updater.len()
    );
    out.push_str(&format!(
        "{:<32} {:<10} {:<16} {:<28} {:<14} {}\n",
        "name", "dtype", "dims", "entry", "shared from", "data sha256"
    ));
    let row = |name: &str, v: &Value| {
        format!(
            "{:<32} {:<10} {:<16} {:<28} {:<14} {}\n",
            clean(name),
            v["dtype"].as_str().unwrap_or(""),
            v["dims"].to_string(),
            clean(v["entry"].as_str().unwrap_or("")),
            clean(v["shared_from"].as_str().unwrap_or("-")),
            &v["data_sha256"].as_str().unwrap_or("")
                [..16.min(v["data_sha256"].as_str().unwrap_or("").len())],
        )
    };
    for p in &params {
        out.push_str(&row(p["name"].as_str().unwrap_or(""), p));
    }
    for u in &updater {
        let name = u["name"].as_str().unwrap_or("");
        for (i, a) in u["arrays"].as_array().into_iter().flatten().enumerate() {
            out.push_str(&row(&format!("{name} [updater {i}]"), a));
        }
    }
    print(&out).map(|_| Outcome::Success)
}
