//! `modelzip show`: every param and updater array of a tag.

use super::common::{TagArgs, TensorInfo, TensorJson, tag_err};
use super::output::{Align, Table, clean, io_error, print_json};
use super::{CliError, Outcome};
use modelzip::{Tag, TensorLocation};

use serde::ser::{SerializeMap, SerializeSeq};
use std::io::Write;

/// Show each parameter and updater array of a tag: name, dtype, dims, LoD, the
/// entry it is stored in, whether it is shared and from which tag, and the SHA-256
/// of its data. A tag written by a sharded save (many processes at once) says how
/// many ranks wrote it.
///
/// Example:
///   modelzip show model.zip --tag int8
///   modelzip show model.zip --json
#[derive(clap::Args, Debug, Clone)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    input: TagArgs,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// Every tensor file the tag uses, described once (many names may refer to one file:
/// the output repeats the description, the memory and the hashing do not).
type Infos<'t> = std::collections::HashMap<&'t str, TensorInfo>;

fn describe_files<'t>(tag: &'t Tag<'_>) -> Result<Infos<'t>, CliError> {
    let mut infos: Infos<'t> = Infos::default();
    let locations = tag.locations();
    for loc in locations {
        if infos.contains_key(loc.entry()) {
            continue;
        }
        let data = tag.tensor(loc).map_err(tag_err(tag.name()))?;
        infos.insert(loc.entry(), TensorInfo::of(&data.view()));
    }
    Ok(infos)
}

fn info<'i>(infos: &'i Infos<'_>, loc: &TensorLocation) -> &'i TensorInfo {
    // describe_files described every location of the tag.
    &infos[loc.entry()]
}

/// The `show --json` document, serialized as it is written.
struct Doc<'a, 't> {
    tag: &'a Tag<'t>,
    infos: &'a Infos<'a>,
    sharded: Option<Sharded>,
}

/// What metadata.json's `"sharded"` says of a tag written by a sharded save
/// (docs/SHARDED.md): how many ranks wrote it, and its plan digest.
#[derive(serde::Serialize)]
struct Sharded {
    world_size: u64,
    plan: String,
}

fn sharded_of(tag: &Tag<'_>) -> Result<Option<Sharded>, CliError> {
    let Some(meta) = tag.metadata().map_err(tag_err(tag.name()))? else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_slice(&meta).unwrap_or_default();
    Ok(v.get("sharded").and_then(|s| {
        Some(Sharded {
            world_size: s.get("world_size")?.as_u64()?,
            plan: s.get("plan")?.as_str()?.to_string(),
        })
    }))
}

struct Params<'a, 't>(&'a Doc<'a, 't>);
struct Updater<'a, 't>(&'a Doc<'a, 't>);
struct Arrays<'a>(&'a [TensorLocation], &'a Infos<'a>);

impl serde::Serialize for Doc<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("tag", self.tag.name())?;
        m.serialize_entry("sharded", &self.sharded)?;
        m.serialize_entry("params", &Params(self))?;
        m.serialize_entry("updater", &Updater(self))?;
        m.end()
    }
}

impl serde::Serialize for Params<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let params = self.0.tag.params();
        let mut seq = s.serialize_seq(Some(params.len()))?;
        for p in params {
            seq.serialize_element(&TensorJson {
                name: Some(&p.name),
                loc: &p.location,
                info: info(self.0.infos, &p.location),
            })?;
        }
        seq.end()
    }
}

impl serde::Serialize for Updater<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let updater = self.0.tag.updater();
        let mut seq = s.serialize_seq(Some(updater.len()))?;
        for u in updater {
            seq.serialize_element(&UpdaterJson {
                name: &u.name,
                arrays: Arrays(&u.arrays, self.0.infos),
            })?;
        }
        seq.end()
    }
}

struct UpdaterJson<'a> {
    name: &'a str,
    arrays: Arrays<'a>,
}

impl serde::Serialize for UpdaterJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("name", self.name)?;
        m.serialize_entry("arrays", &self.arrays)?;
        m.end()
    }
}

impl serde::Serialize for Arrays<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for loc in self.0 {
            seq.serialize_element(&TensorJson {
                name: None,
                loc,
                info: info(self.1, loc),
            })?;
        }
        seq.end()
    }
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = args.input.open()?;
    let tag = args.input.pick(&archive)?;
    // Every file is read and checked before anything is printed, so an error never
    // comes after half a document.
    let infos = describe_files(&tag)?;
    let sharded = sharded_of(&tag)?;
    if args.json {
        let doc = Doc {
            tag: &tag,
            infos: &infos,
            sharded,
        };
        return print_json(&doc).map(|_| Outcome::Success);
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 16, super::output::stdout());
    let mut write = || -> std::io::Result<()> {
        writeln!(
            out,
            "tag {}: {} params, {} updater entries",
            clean(tag.name()),
            tag.params().len(),
            tag.updater().len()
        )?;
        if let Some(sh) = &sharded {
            writeln!(
                out,
                "sharded: written by {} ranks in one save (plan {})",
                sh.world_size,
                &sh.plan[..12.min(sh.plan.len())]
            )?;
        }
        // Columns as wide as their widest cell (two passes over the rows, none held).
        use Align::Left;
        let mut table = Table::new(&[Left; 7]);
        let header = [
            "name",
            "dtype",
            "dims",
            "lod",
            "entry",
            "shared from",
            "data sha256",
        ];
        let cells = |name: &str, loc: &TensorLocation| {
            let i = info(&infos, loc);
            let shared = if loc.shared { loc.tag() } else { "-" };
            let lod = if i.lod.is_empty() {
                "-".to_string()
            } else {
                super::tensor::table_lod(&i.lod)
            };
            [
                clean(name).into_owned(),
                i.dtype.name().to_string(),
                format!("{:?}", i.dims),
                lod,
                clean(loc.entry()).into_owned(),
                clean(shared).into_owned(),
                i.data_sha256[..16.min(i.data_sha256.len())].to_string(),
            ]
        };
        let each_row = |f: &mut dyn FnMut([String; 7]) -> std::io::Result<()>| {
            for p in tag.params() {
                f(cells(&p.name, &p.location))?;
            }
            for u in tag.updater() {
                for (i, a) in u.arrays.iter().enumerate() {
                    f(cells(&format!("{} [updater {i}]", u.name), a))?;
                }
            }
            Ok::<(), std::io::Error>(())
        };
        table.fit(&header);
        each_row(&mut |c| {
            table.fit(&c);
            Ok(())
        })?;
        table.write_row(&mut out, "", &header)?;
        each_row(&mut |c| table.write_row(&mut out, "", &c))?;
        out.flush()
    };
    write().map_err(io_error)?;
    Ok(Outcome::Success)
}
