//! `--step`, `--metric NAME=VALUE` and `--metadata FILE.json` of the commands that add a
//! tag: the tag's metadata.json, written as the library's `Checkpointer` writes it
//! (`{"step": N, "metrics": {NAME: VALUE, ...}}`, docs/checkpoints.md), so a tag packed
//! by a shell-driven training job is a checkpoint like one the library saved.

use super::CliError;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The largest `--metadata` file read (the archive refuses a larger metadata.json too).
const MAX_METADATA_FILE: u64 = 1 << 20;

/// The metadata switches of a writing command.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetaArgs {
    /// The training step: makes the tag a checkpoint (metadata.json "step", as the
    /// library's Checkpointer stores it).
    #[arg(long, value_name = "N")]
    pub step: Option<u64>,
    /// A metric of the checkpoint, e.g. --metric loss=0.31 (repeatable; needs --step;
    /// metadata.json "metrics").
    #[arg(long = "metric", value_name = "NAME=VALUE", requires = "step")]
    pub metrics: Vec<String>,
    /// A JSON object to store as the tag's metadata.json (--step and --metric are added
    /// to it).
    #[arg(long, value_name = "FILE.json")]
    pub metadata: Option<PathBuf>,
}

impl MetaArgs {
    /// The metadata.json to write, or None when no switch was given. Every value is
    /// checked here, before the archive is locked.
    pub fn build(&self) -> Result<Option<Vec<u8>>, CliError> {
        if self.step.is_none() && self.metrics.is_empty() && self.metadata.is_none() {
            return Ok(None);
        }
        let mut obj = match &self.metadata {
            Some(path) => read_object(path)?,
            None => Map::new(),
        };
        if let Some(step) = self.step {
            if let Some(file) = &self.metadata
                && (obj.contains_key("step") || obj.contains_key("metrics"))
            {
                return Err(CliError::Failed(format!(
                    "cannot use --step with --metadata {}: the file has a \"step\" or \"metrics\" already (give them once)",
                    file.display()
                )));
            }
            let metrics = parse_metrics(&self.metrics)?;
            obj.insert("step".into(), Value::from(step));
            obj.insert(
                "metrics".into(),
                serde_json::to_value(metrics).map_err(|e| CliError::Failed(e.to_string()))?,
            );
        }
        let text = serde_json::to_string(&Value::Object(obj))
            .map_err(|e| CliError::Failed(format!("cannot write metadata.json: {e}")))?;
        Ok(Some(text.into_bytes()))
    }
}

/// `--metric NAME=VALUE`s as the Checkpointer's map (names sorted, each once).
fn parse_metrics(specs: &[String]) -> Result<BTreeMap<String, f64>, CliError> {
    let mut out = BTreeMap::new();
    for spec in specs {
        let bad = |why: &str| CliError::Failed(format!("invalid --metric {spec:?}: {why}"));
        let (name, value) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected NAME=VALUE, e.g. loss=0.31"))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("the name is empty"));
        }
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| bad("the value is not a number"))?;
        if !value.is_finite() {
            return Err(bad("the value is not finite (JSON has no NaN or inf)"));
        }
        if out.insert(name.to_string(), value).is_some() {
            return Err(bad("the metric is given twice"));
        }
    }
    Ok(out)
}

/// The JSON object in `path`.
fn read_object(path: &std::path::Path) -> Result<Map<String, Value>, CliError> {
    use std::io::Read;
    let fail = |why: String| {
        CliError::Failed(format!(
            "cannot read --metadata: {why} (file {})",
            path.display()
        ))
    };
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_METADATA_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_METADATA_FILE {
        return Err(fail(format!(
            "larger than {MAX_METADATA_FILE} bytes, the limit of a metadata.json"
        )));
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(fail("not a JSON object".into())),
        Err(e) => Err(fail(format!("not valid JSON ({e})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(step: Option<u64>, metrics: &[&str]) -> MetaArgs {
        MetaArgs {
            step,
            metrics: metrics.iter().map(|s| s.to_string()).collect(),
            metadata: None,
        }
    }

    #[test]
    fn stores_what_the_checkpointer_stores() {
        let got = args(Some(1000), &["loss=0.31", "acc=0.9"]).build().unwrap();
        let mut m = BTreeMap::new();
        m.insert("loss".to_string(), 0.31);
        m.insert("acc".to_string(), 0.9);
        let want = serde_json::json!({"step": 1000u64, "metrics": m}).to_string();
        assert_eq!(String::from_utf8(got.unwrap()).unwrap(), want);
        assert!(args(None, &[]).build().unwrap().is_none());
    }

    #[test]
    fn refuses_bad_metrics() {
        for bad in ["loss", "=1", "loss=x", "loss=nan", "loss=inf"] {
            assert!(args(Some(1), &[bad]).build().is_err(), "{bad}");
        }
        assert!(args(Some(1), &["a=1", "a=2"]).build().is_err());
    }
}
