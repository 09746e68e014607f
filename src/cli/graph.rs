//! `modelzip graph`: print a tag's graph as text, JSON or protobuf text format.

use super::common::TagArgs;
use super::output::{clean, print, print_json};
use super::{CliError, Outcome};
use modelzip::Graph;
use modelzip::GraphFormat;
use modelzip::dump;
use modelzip::interop::tf;
use serde_json::json;

/// Print a tag's graph (graph.pdmodel or graph.fb): a readable listing of variables
/// and operations per block (text), the whole graph as one JSON document (json), the
/// ProgramDesc in protobuf text format (pbtxt; a graph.fb tag is converted to
/// ProgramDesc first), or a Graphviz drawing (dot: operations labelled with their
/// type, parameters with dtype and dims). A graph imported from TensorFlow lists its
/// nodes as `name = Op(inputs)  attrs  @device`, and its pbtxt is the GraphDef with
/// the constants' values filled in from the parameters (as `export --format tf` writes).
/// A Paddle 3 PIR program prints its op counts and its parameters (dtype, dims) in
/// .pdiparams record order; its pbtxt is refused (the program is JSON).
///
/// Example:
///   modelzip graph model.zip
///   modelzip graph model.zip --tag fp32 --format json
///   modelzip graph model.zip --format pbtxt > program.pbtxt
///   modelzip graph model.zip --format dot | dot -Tsvg > graph.svg
#[derive(clap::Args, Debug, Clone)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    input: TagArgs,
    /// Output format.
    #[arg(long, value_enum, ignore_case = true, default_value_t = Format::Text)]
    format: Format,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// A listing for people (long values abbreviated).
    Text,
    /// One JSON document (docs/CLI.md, docs/GRAPH.md).
    Json,
    /// Protobuf text format of the ProgramDesc (or of the TensorFlow GraphDef).
    Pbtxt,
    /// Graphviz DOT.
    Dot,
}

/// `programdesc` / `flatbuffers`: the names `convert --to` takes.
pub fn encoding_name(enc: GraphFormat) -> &'static str {
    match enc {
        GraphFormat::ProgramDesc => "programdesc",
        GraphFormat::FlatBuffers => "flatbuffers",
    }
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = args.input.open()?;
    let tag = args.input.pick(&archive)?;
    let name = tag.name().to_string();
    let (enc, bytes) = tag
        .graph()
        .map_err(|e| CliError::Failed(format!("cannot read the graph of tag {name:?}: {e}")))?
        .ok_or_else(|| {
            let why = if modelzip::interop::tf::saved_model::is_saved_model_tag(&tag) {
                "the tag holds a TensorFlow SavedModel, whose saved_model/saved_model.pb \
                 modelzip keeps undecoded (no graph.pdmodel or graph.fb); `modelzip show` \
                 lists its variables, `modelzip export` writes the SavedModel back"
            } else {
                "the tag has no graph (no graph.pdmodel or graph.fb)"
            };
            CliError::Failed(format!(
                "cannot print the graph of tag {name:?}: {why} (file {})",
                args.input.archive.display()
            ))
        })?;
    let entry = format!("{name}/{}", enc.file_name());
    let bad = |e: modelzip::Error| CliError::Failed(format!("cannot decode {entry}: {e}"));
    let graph = match enc {
        GraphFormat::ProgramDesc => Graph::decode(GraphFormat::ProgramDesc, &bytes),
        GraphFormat::FlatBuffers => Graph::decode(GraphFormat::FlatBuffers, &bytes),
    }
    .map_err(bad)?;
    match args.format {
        Format::Text => print(&format!(
            "tag {}: {} ({} bytes)\n{}",
            clean(&name),
            enc.file_name(),
            bytes.len(),
            dump::text(&graph)
        ))?,
        Format::Json => print_json(&json!({
            "tag": name,
            "entry": entry,
            "encoding": encoding_name(enc),
            "bytes": bytes.len(),
            // The library renders text; embedded here as a value, not a string.
            "graph": serde_json::from_str::<serde_json::Value>(&dump::json(&graph))
                .map_err(|e| CliError::Failed(format!("cannot render {entry} as JSON: {e}")))?,
        }))?,
        Format::Dot => print(&dump::dot(&graph))?,
        Format::Pbtxt if matches!(graph, modelzip::Graph::Tf(_)) => {
            let text = tf::export_graphdef_text(&tag).map_err(|e| {
                CliError::Failed(format!("cannot rebuild the GraphDef of tag {name:?}: {e}"))
            })?;
            print(&text)?
        }
        Format::Pbtxt => {
            let pd = match enc {
                GraphFormat::ProgramDesc => bytes.into_owned(),
                GraphFormat::FlatBuffers => {
                    graph.encode(GraphFormat::ProgramDesc).map_err(|e| {
                        CliError::Failed(format!("cannot convert {entry} to ProgramDesc: {e}"))
                    })?
                }
            };
            let mut text = dump::pbtxt(&pd).map_err(bad)?;
            if !text.ends_with('\n') {
                text.push('\n');
            }
            print(&text)?
        }
    }
    Ok(Outcome::Success)
}
