//! TrainingConfig: the updater and its hyper-parameters, stored as trainingConfig.fb.
//!
//! ```
//! use modelzip::TrainingConfig;
//!
//! let mut cfg = TrainingConfig::adam(1e-3, 0.9, 0.999, 1e-8);
//! cfg.iteration = 5000;
//! cfg.loss_variables.push("loss".into());
//! let bytes = cfg.encode()?;
//! assert_eq!(TrainingConfig::decode(&bytes)?, cfg);
//! assert_eq!(cfg.updater_state, ["m", "v"]);
//! # Ok::<(), modelzip::Error>(())
//! ```

use ::flatbuffers::{FlatBufferBuilder, ForwardsUOffset, Vector, WIPOffset};

use super::flatbuffers::verified_root;
use super::generated::training as fbt;
use super::programdesc::gerr;
use crate::error::Result;

/// The file identifier of trainingConfig.fb (bytes 4..8).
pub const IDENTIFIER: &str = "MZTC";
/// The schema version this code writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// How a tag's parameters are being trained.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrainingConfig {
    /// The updater (optimizer): `sgd`, `momentum`, `adam`, `adamw`, ...
    pub updater: String,
    /// The updater's hyper-parameters, by name, in order (`beta1`, `epsilon`, ...).
    pub hyper_parameters: Vec<(String, HyperParam)>,
    /// Names of the updater's per-parameter state arrays, in updater.txt column order
    /// (adam: `m`, `v`).
    pub updater_state: Vec<String>,
    /// The current learning rate, if the updater has one.
    pub learning_rate: Option<f64>,
    /// Iterations (steps) completed.
    pub iteration: i64,
    /// Epochs completed.
    pub epoch: i64,
    /// The loss variables of the graph that training minimizes.
    pub loss_variables: Vec<String>,
    /// Regularization terms.
    pub regularization: Vec<Regularization>,
}

/// A hyper-parameter value: SameDiff's long, double or bool argument.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HyperParam {
    /// An integer.
    Long(i64),
    /// A real number.
    Double(f64),
    /// A flag.
    Bool(bool),
}

/// A regularization term.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Regularization {
    /// `l1`, `l2`, `weight_decay`, ...
    pub kind: String,
    /// Its coefficients by name (`coeff`, ...).
    pub args: Vec<(String, f64)>,
    /// The variables it applies to; empty means every trainable parameter.
    pub variables: Vec<String>,
}

impl TrainingConfig {
    /// Plain SGD with learning rate `lr` (no state arrays).
    pub fn sgd(lr: f64) -> TrainingConfig {
        TrainingConfig {
            updater: "sgd".into(),
            learning_rate: Some(lr),
            ..TrainingConfig::default()
        }
    }

    /// Adam with its usual hyper-parameters; state arrays `m` and `v`.
    pub fn adam(lr: f64, beta1: f64, beta2: f64, epsilon: f64) -> TrainingConfig {
        TrainingConfig {
            updater: "adam".into(),
            hyper_parameters: vec![
                ("beta1".into(), HyperParam::Double(beta1)),
                ("beta2".into(), HyperParam::Double(beta2)),
                ("epsilon".into(), HyperParam::Double(epsilon)),
            ],
            updater_state: vec!["m".into(), "v".into()],
            learning_rate: Some(lr),
            ..TrainingConfig::default()
        }
    }

    /// Encodes the configuration as trainingConfig.fb bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        if self.updater.is_empty() {
            return Err(gerr("training config: the updater name is empty"));
        }
        let mut fbb = FlatBufferBuilder::with_capacity(1024);
        let (mut i_names, mut i_vals) = (Vec::new(), Vec::new());
        let (mut t_names, mut t_vals) = (Vec::new(), Vec::new());
        let (mut b_names, mut b_vals) = (Vec::new(), Vec::new());
        let mut order = Vec::new();
        for (name, v) in &self.hyper_parameters {
            match v {
                HyperParam::Long(x) => {
                    i_names.push(name.clone());
                    i_vals.push(*x);
                    order.push(fbt::ArgGroup::I);
                }
                HyperParam::Double(x) => {
                    t_names.push(name.clone());
                    t_vals.push(*x);
                    order.push(fbt::ArgGroup::T);
                }
                HyperParam::Bool(x) => {
                    b_names.push(name.clone());
                    b_vals.push(*x);
                    order.push(fbt::ArgGroup::B);
                }
            }
        }
        let regs: Vec<_> = self
            .regularization
            .iter()
            .map(|r| {
                let kind = Some(fbb.create_string(&r.kind));
                let names: Vec<String> = r.args.iter().map(|(n, _)| n.clone()).collect();
                let vals: Vec<f64> = r.args.iter().map(|(_, v)| *v).collect();
                let t_arg_names = Some(string_vec(&mut fbb, &names));
                let t_args = Some(fbb.create_vector(&vals));
                let variables = Some(string_vec(&mut fbb, &r.variables));
                fbt::Regularization::create(
                    &mut fbb,
                    &fbt::RegularizationArgs {
                        kind,
                        t_arg_names,
                        t_args,
                        variables,
                    },
                )
            })
            .collect();
        let args = fbt::TrainingConfigArgs {
            schema_version: SCHEMA_VERSION,
            updater: Some(fbb.create_string(&self.updater)),
            i_arg_names: Some(string_vec(&mut fbb, &i_names)),
            i_args: Some(fbb.create_vector(&i_vals)),
            t_arg_names: Some(string_vec(&mut fbb, &t_names)),
            t_args: Some(fbb.create_vector(&t_vals)),
            b_arg_names: Some(string_vec(&mut fbb, &b_names)),
            b_args: Some(fbb.create_vector(&b_vals)),
            arg_order: Some(fbb.create_vector(&order)),
            updater_state: Some(string_vec(&mut fbb, &self.updater_state)),
            learning_rate: self.learning_rate,
            iteration: self.iteration,
            epoch: self.epoch,
            loss_variables: Some(string_vec(&mut fbb, &self.loss_variables)),
            regularization: Some(fbb.create_vector(&regs)),
        };
        let root = fbt::TrainingConfig::create(&mut fbb, &args);
        fbt::finish_training_config_buffer(&mut fbb, root);
        Ok(fbb.finished_data().to_vec())
    }

    /// Decodes trainingConfig.fb bytes (identifier and FlatBuffers verifier checked first).
    pub fn decode(bytes: &[u8]) -> Result<TrainingConfig> {
        let root = verified_root::<fbt::TrainingConfig>(bytes, IDENTIFIER, "trainingConfig.fb")?;
        if root.schema_version() != SCHEMA_VERSION {
            return Err(gerr(format!(
                "trainingConfig.fb schema_version {} is not supported (this build reads {SCHEMA_VERSION})",
                root.schema_version()
            )));
        }
        // The encoder refuses an empty updater name; so does the decoder, or a config read
        // from an archive could not be written back.
        if root.updater().is_empty() {
            return Err(gerr("trainingConfig.fb: the updater name is empty"));
        }
        let i_names = strings(root.i_arg_names());
        let i_vals: Vec<i64> = root
            .i_args()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let t_names = strings(root.t_arg_names());
        let t_vals: Vec<f64> = root
            .t_args()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let b_names = strings(root.b_arg_names());
        let b_vals: Vec<bool> = root
            .b_args()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        for (g, n, v) in [
            ("i", i_names.len(), i_vals.len()),
            ("t", t_names.len(), t_vals.len()),
            ("b", b_names.len(), b_vals.len()),
        ] {
            if n != v {
                return Err(gerr(format!(
                    "trainingConfig.fb: {g}_arg_names has {n} entries but {g}_args has {v}"
                )));
            }
        }
        let mut i = i_names
            .into_iter()
            .zip(i_vals.into_iter().map(HyperParam::Long));
        let mut t = t_names
            .into_iter()
            .zip(t_vals.into_iter().map(HyperParam::Double));
        let mut b = b_names
            .into_iter()
            .zip(b_vals.into_iter().map(HyperParam::Bool));
        let mut hyper_parameters = Vec::new();
        match root.arg_order() {
            Some(order) => {
                for g in order.iter() {
                    let next = match g {
                        fbt::ArgGroup::I => i.next(),
                        fbt::ArgGroup::T => t.next(),
                        fbt::ArgGroup::B => b.next(),
                        x => {
                            return Err(gerr(format!(
                                "trainingConfig.fb: unknown ArgGroup value {}",
                                x.0
                            )));
                        }
                    };
                    hyper_parameters.push(next.ok_or_else(|| {
                        gerr("trainingConfig.fb: arg_order names more arguments than there are")
                    })?);
                }
                if i.next().is_some() || t.next().is_some() || b.next().is_some() {
                    return Err(gerr(
                        "trainingConfig.fb: arg_order names fewer arguments than there are",
                    ));
                }
            }
            None => hyper_parameters.extend(i.chain(t).chain(b)),
        }
        let regularization = root
            .regularization()
            .map(|rs| {
                rs.iter()
                    .map(|r| {
                        let names = strings(r.t_arg_names());
                        let vals: Vec<f64> =
                            r.t_args().map(|v| v.iter().collect()).unwrap_or_default();
                        if names.len() != vals.len() {
                            return Err(gerr(format!(
                                "trainingConfig.fb: regularization {:?} has {} argument names and {} values",
                                r.kind(),
                                names.len(),
                                vals.len()
                            )));
                        }
                        Ok(Regularization {
                            kind: r.kind().to_string(),
                            args: names.into_iter().zip(vals).collect(),
                            variables: strings(r.variables()),
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?
            .unwrap_or_default();
        Ok(TrainingConfig {
            updater: root.updater().to_string(),
            hyper_parameters,
            updater_state: strings(root.updater_state()),
            learning_rate: root.learning_rate(),
            iteration: root.iteration(),
            epoch: root.epoch(),
            loss_variables: strings(root.loss_variables()),
            regularization,
        })
    }
}

fn strings(v: Option<Vector<'_, ForwardsUOffset<&str>>>) -> Vec<String> {
    v.map(|v| v.iter().map(str::to_string).collect())
        .unwrap_or_default()
}

fn string_vec<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    items: &[String],
) -> WIPOffset<Vector<'a, ForwardsUOffset<&'a str>>> {
    let offsets: Vec<_> = items.iter().map(|s| fbb.create_string(s)).collect();
    fbb.create_vector(&offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_order_and_everything() {
        let cfg = TrainingConfig {
            updater: "adamw".into(),
            hyper_parameters: vec![
                ("beta1".into(), HyperParam::Double(0.9)),
                ("lazy_mode".into(), HyperParam::Bool(false)),
                ("warmup_steps".into(), HyperParam::Long(100)),
                ("beta2".into(), HyperParam::Double(0.999)),
            ],
            updater_state: vec!["m".into(), "v".into()],
            learning_rate: Some(3e-4),
            iteration: 12,
            epoch: 1,
            loss_variables: vec!["loss".into()],
            regularization: vec![Regularization {
                kind: "l2".into(),
                args: vec![("coeff".into(), 1e-4)],
                variables: vec!["fc_0.w_0".into()],
            }],
        };
        let bytes = cfg.encode().unwrap();
        assert_eq!(&bytes[4..8], b"MZTC");
        assert_eq!(TrainingConfig::decode(&bytes).unwrap(), cfg);
        let sgd = TrainingConfig::sgd(0.1);
        assert_eq!(TrainingConfig::decode(&sgd.encode().unwrap()).unwrap(), sgd);
    }

    #[test]
    fn bad_bytes_are_errors() {
        let bytes = TrainingConfig::adam(1e-3, 0.9, 0.999, 1e-8)
            .encode()
            .unwrap();
        assert!(TrainingConfig::decode(&[]).is_err());
        assert!(TrainingConfig::decode(&bytes[..bytes.len() / 2]).is_err());
        let mut wrong = bytes.clone();
        wrong[4..8].copy_from_slice(b"MZGF");
        assert!(
            TrainingConfig::decode(&wrong)
                .unwrap_err()
                .to_string()
                .contains("identifier")
        );
        let graph = crate::Graph::from(crate::graph::Program::default())
            .to_flatbuffers()
            .unwrap();
        assert!(TrainingConfig::decode(&graph).is_err());
        assert!(
            TrainingConfig {
                updater: String::new(),
                ..Default::default()
            }
            .encode()
            .is_err()
        );
    }
}
