//! A tag out as a Paddle inference model: `PREFIX.pdmodel` + `PREFIX.pdiparams`, or
//! `PREFIX.json` + `PREFIX.pdiparams` for a PIR program.

use super::vars::{check_declared, declared};
use crate::archive::{GraphFormat, Tag, TensorData};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::Graph;
use crate::interop::{ExportOptions, write_temp};
use crate::tensor::{TensorView, encode_combined};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportReport {
    /// The tag exported, spelled as in tags.txt.
    pub tag: String,
    /// `PREFIX.pdmodel`, or `PREFIX.json` for a PIR program.
    pub model_path: PathBuf,
    /// `PREFIX.pdiparams`; `None` when the program has no persistable variables (like
    /// Paddle's own `save_inference_model`, no params file is written then).
    pub params_path: Option<PathBuf>,
    /// Bytes of the `.pdmodel` (or `.json`).
    pub model_bytes: u64,
    /// Bytes of the `.pdiparams`.
    pub params_bytes: u64,
    /// True when the tag's graph was graph.fb and was converted to ProgramDesc.
    pub graph_converted: bool,
    /// The parameters written, in file order.
    pub params: Vec<String>,
    /// Parameters of the tag the program does not use (not written).
    pub unused: Vec<String>,
}

/// A tag ready to be written as an inference model.
struct Prepared<'a> {
    model: Cow<'a, [u8]>,
    converted: bool,
    /// The program is PIR JSON: written as `PREFIX.json`.
    pir: bool,
    /// Each variable's name and its tensor (a position in `data`).
    params: Vec<(String, usize)>,
    /// Each tensor file the variables use, read once (many names may share one).
    data: Vec<TensorData<'a>>,
    unused: Vec<String>,
}

impl Prepared<'_> {
    /// Bytes the `.pdiparams` file takes.
    fn params_len(&self) -> u64 {
        let lens: Vec<u64> = self
            .data
            .iter()
            .map(|d| crate::tensor::codec::encoded_len(&d.view()))
            .collect();
        self.params
            .iter()
            .map(|&(_, i)| lens[i])
            .fold(0u64, u64::saturating_add)
    }
}

fn prepare<'a>(tag: &Tag<'a>) -> Result<Prepared<'a>> {
    let name = tag.name();
    let Some((enc, bytes)) = tag.graph()? else {
        return Err(crate::interop::wrong_graph(
            name,
            crate::interop::GraphKind::without_graph(tag),
            "Paddle",
        ));
    };
    let (graph, model, converted) = match enc {
        GraphFormat::ProgramDesc => {
            let g = Graph::from_programdesc(&bytes)
                .map_err(|e| e.in_entry(format!("{name}/graph.pdmodel")))?;
            (g, bytes, false)
        }
        GraphFormat::FlatBuffers => {
            let located = |e: Error| e.in_entry(format!("{name}/graph.fb"));
            let g = Graph::from_flatbuffers(&bytes).map_err(located)?;
            // A graph imported from TensorFlow or ONNX has no ProgramDesc form: say what
            // the tag can be exported as instead.
            match &g {
                Graph::Tf(_) | Graph::Onnx(_) => {
                    let has = crate::interop::GraphKind::of_fb(&g);
                    return Err(crate::interop::wrong_graph(name, has, "Paddle"));
                }
                // A PIR program goes out as the JSON Paddle wrote.
                Graph::Pir(p) => {
                    let json = p.json.clone();
                    (g, Cow::Owned(json), false)
                }
                Graph::Program(_) => {
                    let pd = g.to_programdesc().map_err(located)?;
                    (g, Cow::Owned(pd), true)
                }
            }
        }
    };
    let pir = matches!(graph, Graph::Pir(_));
    let vars = declared(&graph).map_err(|e| {
        let file = enc.file_name();
        e.in_entry(format!("{name}/{file}"))
    })?;
    let mut params = Vec::with_capacity(vars.len());
    let mut data_of: HashMap<&str, usize> = HashMap::new();
    let mut all_data: Vec<TensorData<'a>> = Vec::new();
    let by_name: HashMap<&str, &crate::archive::TensorLocation> = tag
        .params()
        .iter()
        .map(|p| (p.name.as_str(), &p.location))
        .collect();
    for v in &vars {
        if !by_name.contains_key(v.name.as_str()) {
            return Err(ErrorKind::InvalidInput(format!(
                "variable {:?} is persistable in the program but tag {name:?} has no \
                 parameter of that name",
                v.name
            ))
            .into());
        }
        let loc = by_name[v.name.as_str()];
        let i = match data_of.get(loc.entry.as_str()) {
            Some(&i) => i,
            None => {
                all_data.push(tag.tensor(loc)?);
                data_of.insert(loc.entry.as_str(), all_data.len() - 1);
                all_data.len() - 1
            }
        };
        check_declared(
            v,
            &all_data[i].view(),
            &format!("parameter {:?} of tag {name:?}", v.name),
        )?;
        params.push((v.name.clone(), i));
    }
    let used: HashSet<&str> = vars.iter().map(|v| v.name.as_str()).collect();
    let unused = tag
        .params()
        .iter()
        .filter(|p| !used.contains(p.name.as_str()))
        .map(|p| p.name.clone())
        .collect();
    Ok(Prepared {
        model,
        converted,
        pir,
        params,
        data: all_data,
        unused,
    })
}

/// Checks that tag `tag` has every parameter its program loads, with the declared
/// dtype and dims (what an export needs); `verify` runs it on tags holding a PIR program.
pub(crate) fn check_params(tag: &Tag<'_>) -> Result<()> {
    prepare(tag).map(|_| ())
}

fn write_params(p: &Prepared<'_>, w: &mut dyn Write) -> std::io::Result<u64> {
    let views: Vec<TensorView<'_>> = p.data.iter().map(TensorData::view).collect();
    encode_combined(p.params.iter().map(|&(_, i)| &views[i]), w)
}

/// The `.pdmodel` (or PIR `.json`) and `.pdiparams` bytes of tag `tag`, in memory (see
/// the `paddle` format's export, docs/PADDLE.md "Export", for the rules).
pub fn export_inference_model_bytes(tag: &Tag<'_>) -> Result<(Vec<u8>, Vec<u8>)> {
    let p = prepare(tag)?;
    let mut params = Vec::new();
    write_params(&p, &mut params)?;
    Ok((p.model.into_owned(), params))
}

/// `prefix` with `ext` appended (`out/model.v1` + `.pdmodel`, not a replaced extension).
fn with_suffix(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(ext);
    PathBuf::from(s)
}

/// The two paths an export of `prefix` writes for a tag holding a ProgramDesc:
/// `PREFIX.pdmodel`, `PREFIX.pdiparams` (a PIR program's: [`export_paths_pir`]).
pub fn export_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    (
        with_suffix(prefix, ".pdmodel"),
        with_suffix(prefix, ".pdiparams"),
    )
}

/// The two paths an export of a tag holding a PIR program writes: `PREFIX.json`,
/// `PREFIX.pdiparams` (what `paddle.jit.load(PREFIX)` and
/// `paddle.static.load_inference_model(PREFIX, exe)` read in Paddle 3).
pub fn export_paths_pir(prefix: &Path) -> (PathBuf, PathBuf) {
    (
        with_suffix(prefix, ".json"),
        with_suffix(prefix, ".pdiparams"),
    )
}

/// Writes tag `tag` as `PREFIX.pdmodel` + `PREFIX.pdiparams`, the files
/// `paddle.static.load_inference_model(PREFIX, exe)` loads.
///
/// The program is the tag's `graph.pdmodel` as stored, or its `graph.fb` converted to
/// ProgramDesc; a tag without a graph is an error. A tag holding a PIR program (imported
/// from a Paddle 3 `.json`) is written as `PREFIX.json`, the JSON as Paddle wrote it,
/// plus `PREFIX.pdiparams`. The params file holds, in the order
/// of the program's persistable variables, sorted by name (a PIR program: of its parameters), the tag's
/// parameter of each variable (each must exist and match the declared dtype and dims),
/// written with [`encode_combined`]; parameters the program does not use are left out
/// and listed in the report.
///
/// Both files are written to temp files beside their targets, fsynced, then renamed
/// into place; existing files are refused unless `opts.overwrite`. If the second rename
/// fails, the first file is removed again, so no half pair is left behind.
pub fn export_inference_model(
    tag: &Tag<'_>,
    prefix: &Path,
    opts: &ExportOptions,
) -> Result<ExportReport> {
    let p = prepare(tag)?;
    let total = (p.model.len() as u64).saturating_add(p.params_len());
    crate::interop::check_output_size(
        tag,
        opts,
        "export size (the program and .pdiparams files together)",
        total,
    )?;
    // `out/` (or `.`, `..`) names a directory, not a prefix: the files would be the
    // hidden `out/.pdmodel` and `out/.pdiparams`, which Paddle does not take either.
    let text = prefix.as_os_str().to_string_lossy();
    let last = text.rsplit(std::path::is_separator).next().unwrap_or("");
    if matches!(last, "" | "." | "..") {
        let program = if p.pir { "json" } else { "pdmodel" };
        return Err(Error::new(ErrorKind::InvalidInput(format!(
            "{text:?} names a directory, not a file prefix; give a prefix such as \
             {:?} (writes inference.{program} and inference.pdiparams there)",
            prefix.join("inference")
        )))
        .in_file(prefix));
    }
    let (model_path, params_path) = if p.pir {
        export_paths_pir(prefix)
    } else {
        export_paths(prefix)
    };
    let dir = crate::archive::parent_dir(&model_path);
    if !dir.is_dir() {
        return Err(Error::new(ErrorKind::InvalidInput(
            "the output directory does not exist".into(),
        ))
        .in_file(&dir));
    }
    for path in [&model_path, &params_path] {
        crate::interop::refuse_existing(tag, path, opts.overwrite)?;
    }
    let model_tmp = write_temp(&model_path, opts.fsync, |w| w.write_all(&p.model))?;
    let mut params_bytes = 0;
    let wrote_params = !p.params.is_empty();
    let mut temps = Vec::with_capacity(2);
    let mut stale = Vec::new();
    if wrote_params {
        let params_tmp = write_temp(&params_path, opts.fsync, |w| {
            write_params(&p, w).map(|_| ())
        })?;
        params_bytes = crate::interop::file_len(params_tmp.path(), &params_path)?;
        temps.push((params_tmp, params_path.clone()));
    } else if params_path.exists() {
        // Only reached with `overwrite`: a params file of an earlier export would not
        // belong to this program.
        stale.push(params_path.clone());
    }
    // The params first, the program last; a failure leaves both files as they were.
    temps.push((model_tmp, model_path.clone()));
    crate::interop::persist_all(temps, &stale, opts.overwrite)?;
    if opts.fsync {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::from(e).in_file(&dir))?;
    }
    Ok(ExportReport {
        tag: tag.name().to_string(),
        model_bytes: p.model.len() as u64,
        params_bytes,
        model_path,
        params_path: wrote_params.then_some(params_path),
        graph_converted: p.converted,
        params: p.params.iter().map(|(n, _)| n.clone()).collect(),
        unused: p.unused,
    })
}
