//! [`Archive::verify`]: every check a reader makes, over every entry and tag.

use super::container::{METHOD_STORED, ZipEntry};
use super::hashing::sha256_hex;
use super::reader::Archive;
use super::tag::is_shared;
use super::text;
use crate::tensor::decode_tensor;
use std::collections::HashMap;

/// One integrity problem found by [`Archive::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFinding {
    /// The entry concerned, if any.
    pub entry: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// Result of [`Archive::verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Every problem found; empty when the archive is sound.
    pub problems: Vec<VerifyFinding>,
}

impl VerifyReport {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    pub(crate) fn push(&mut self, entry: Option<&str>, message: impl Into<String>) {
        self.problems.push(VerifyFinding {
            entry: entry.map(str::to_string),
            message: message.into(),
        });
    }

    /// Pushes an error as a finding: the entry its location names (else `entry`), the
    /// message without the archive file and the entry (the report says both already).
    pub(crate) fn push_error(&mut self, entry: Option<&str>, err: &crate::Error) {
        let loc = err.location();
        let rest = crate::error::Location {
            file: None,
            entry: None,
            ..loc.clone()
        };
        let message = if rest == crate::error::Location::default() {
            err.kind().to_string()
        } else {
            format!("{} ({rest})", err.kind())
        };
        self.push(loc.entry.as_deref().or(entry), message);
    }

    /// Drops repeated findings (one bad entry fails the CRC pass, the tag's tables and
    /// its manifest check with the same error; a summary that does not read is also
    /// reported as "ignored: <the same error>"), keeping the first of each.
    fn dedup(&mut self) {
        let mut seen = std::collections::HashSet::new();
        self.problems.retain(|p| {
            let message = p.message.strip_prefix("ignored: ").unwrap_or(&p.message);
            seen.insert((p.entry.clone(), message.to_string()))
        });
    }
}

impl Archive {
    /// Checks everything: CRCs, every listed tag's tables and refs, that every tensor
    /// decodes with dtype × dims bytes, that each graph decodes (ProgramDesc with its
    /// required fields, graph.fb through the FlatBuffers verifier; a TensorFlow graph's
    /// constants refer to parameters of the tag with their dtype and dims), metadata.json,
    /// sha256sums.txt manifests, files under unlisted tag directories and listed tags with
    /// no files, and that a current summary (`_summary.txt`) says what the tables say.
    pub fn verify(&self) -> VerifyReport {
        self.verify_inner(None)
    }

    /// [`Archive::verify`], reporting progress: a unit is one entry's CRC-32 check, then
    /// one tag's checks (tables, tensors, manifest).
    pub fn verify_with_progress(&self, progress: &dyn Fn(u64, u64)) -> VerifyReport {
        self.verify_inner(Some(progress))
    }

    fn verify_inner(&self, progress: Option<&dyn Fn(u64, u64)>) -> VerifyReport {
        let total = (self.dir.entries.len() + self.tags.len()) as u64;
        let mut ticker = crate::progress::Ticker::new(progress, total);
        let mut r = VerifyReport::default();
        for e in &self.dir.entries {
            if e.method == METHOD_STORED {
                let crc = match self.raw_data(e) {
                    Ok(raw) => crc32fast::hash(&raw),
                    Err(err) => {
                        r.push_error(Some(&e.name), &err);
                        ticker.tick();
                        continue;
                    }
                };
                if crc != e.crc32 {
                    r.push(
                        Some(&e.name),
                        format!("CRC-32 is {crc:08x}, the directory says {:08x}", e.crc32),
                    );
                }
            } else if let Err(err) = self.check_entry(e) {
                r.push_error(Some(&e.name), &err);
            }
            ticker.tick();
        }
        let mut dirs_seen: HashMap<&str, bool> = HashMap::new();
        for e in &self.dir.entries {
            if let Some((top, _)) = e.name.split_once('/') {
                dirs_seen.entry(top).or_insert(false);
            }
        }
        for t in &self.tags {
            if let Some(seen) = dirs_seen.get_mut(t.as_str()) {
                *seen = true;
            } else {
                r.push(
                    None,
                    format!("tag {t:?} is listed in tags.txt but has no files"),
                );
            }
        }
        let mut unlisted: Vec<&str> = dirs_seen
            .iter()
            .filter(|(_, listed)| !**listed)
            .map(|(d, _)| *d)
            .collect();
        unlisted.sort();
        for d in unlisted {
            r.push(
                Some(d),
                format!("files under {d}/, which is not a tag listed in tags.txt"),
            );
        }
        for t in &self.tags {
            self.verify_tag(t, &mut r);
            ticker.tick();
        }
        self.verify_summary(&mut r);
        r.dedup();
        r
    }

    fn verify_tag(&self, t: &str, r: &mut VerifyReport) {
        let prefix = format!("{t}/");
        if self.entry(&format!("{t}/params.txt")).is_none()
            && self.entries_under(t).next().is_some()
        {
            r.push(None, format!("tag {t:?} has no params.txt"));
        }
        match self.tag_cached(t, false) {
            Ok(tag) => {
                match tag.graph() {
                    Err(e) => r.push_error(None, &e),
                    // Decoded as every reader does (ProgramDesc with its required fields,
                    // graph.fb through the FlatBuffers verifier), not just read.
                    Ok(Some((enc, bytes))) => match crate::graph::Graph::decode(enc, &bytes) {
                        Err(e) => r.push(
                            Some(&format!("{t}/{}", enc.file_name())),
                            format!(
                                "the graph does not decode: {}",
                                crate::graph::graph_error_why(&e)
                            ),
                        ),
                        // A TensorFlow graph's constants must be the tag's parameters.
                        Ok(g) => {
                            if let Some(tf) = &g.tf
                                && let Err(e) = crate::interop::tf::check_refs(&tag, tf)
                            {
                                r.push_error(Some(&format!("{t}/{}", enc.file_name())), &e);
                            }
                            // So must an ONNX model's initializers.
                            if let Some(onnx) = &g.onnx
                                && let Err(e) = crate::interop::onnx::check_refs(&tag, onnx)
                            {
                                r.push_error(Some(&format!("{t}/{}", enc.file_name())), &e);
                            }
                            // And a PIR program's parameters, with the declared types.
                            if g.pir.is_some()
                                && let Err(e) = crate::interop::paddle::check_params(&tag)
                            {
                                r.push_error(Some(&format!("{t}/{}", enc.file_name())), &e);
                            }
                        }
                    },
                    Ok(None) => {}
                }
                match tag.training_config() {
                    Ok(Some(_)) if is_shared(&tag, "trainingConfig.fb") => {}
                    Ok(Some(b)) => {
                        if let Err(e) = crate::graph::training_config::TrainingConfig::decode(&b) {
                            r.push(
                                Some(&format!("{t}/trainingConfig.fb")),
                                format!("the training config does not decode: {}", e.kind()),
                            );
                        }
                    }
                    Err(e) => r.push_error(None, &e),
                    Ok(None) => {}
                }
                match tag.metadata() {
                    // Checked without building the document (constant memory).
                    Ok(Some(m)) if serde_json::from_slice::<serde::de::IgnoredAny>(&m).is_err() => {
                        r.push(Some(&format!("{t}/metadata.json")), "not valid JSON");
                    }
                    // FORMAT.md: a JSON object. Valid JSON whose first non-blank byte
                    // is not `{` is some other value (an array, a string, a number).
                    Ok(Some(m)) if m.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') => {
                        r.push(
                            Some(&format!("{t}/metadata.json")),
                            "not a JSON object (FORMAT.md: metadata.json is an object)",
                        );
                    }
                    Err(e) => r.push_error(None, &e),
                    _ => {}
                }
            }
            Err(e) => r.push_error(None, &e),
        }
        let own: Vec<&ZipEntry> = self.entries_under(t).collect();
        for e in &own {
            let rel = &e.name[prefix.len()..];
            let is_tensor = (rel.starts_with("params/") || rel.starts_with("updater/"))
                && rel.ends_with(".lodtensor");
            if is_tensor {
                match self.read_entry(e) {
                    Ok(b) => {
                        if let Err(err) = decode_tensor(&b) {
                            r.push_error(Some(&e.name), &err);
                        }
                    }
                    Err(err) => r.push_error(Some(&e.name), &err),
                }
            }
        }
        let sums_name = format!("{t}/sha256sums.txt");
        let Some(sums_entry) = self.entry(&sums_name) else {
            return;
        };
        let sums = match self
            .read_entry(sums_entry)
            .and_then(|b| text::parse_sums(&b, &sums_name))
        {
            Ok(s) => s,
            Err(e) => {
                r.push_error(Some(&sums_name), &e);
                return;
            }
        };
        let mut listed = std::collections::HashSet::new();
        for (hex, rel) in &sums {
            let name = format!("{prefix}{rel}");
            listed.insert(name.clone());
            match self.entry(&name) {
                None => r.push(Some(&sums_name), format!("lists {rel:?}, which is missing")),
                Some(e) => match self.read_entry(e) {
                    Ok(b) => {
                        let got = sha256_hex(&b);
                        if &got != hex {
                            r.push(
                                Some(&name),
                                format!("SHA-256 is {got}, sha256sums.txt says {hex}"),
                            );
                        }
                    }
                    Err(err) => r.push_error(Some(&name), &err),
                },
            }
        }
        for e in own {
            if e.name != sums_name && !e.name.ends_with('/') && !listed.contains(&e.name) {
                r.push(Some(&e.name), "not listed in the tag's sha256sums.txt");
            }
        }
    }
}
