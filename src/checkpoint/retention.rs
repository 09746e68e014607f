//! Which checkpoints a retention policy keeps, and why; and the record of the policy
//! and of the checkpoints it removed that a checkpointer writes into each checkpoint's
//! metadata.json (the `retention` key), so that a reader of the archive (`modelzip
//! view`, [`history`](super::history)) can tell what was kept, by which rule, and what
//! is gone.

use super::{Goal, KeepBest, Retention};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::fmt;

/// A checkpoint as its metadata.json describes it: its tag, step and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRecord {
    /// The tag, spelled as in tags.txt.
    pub tag: String,
    /// The training step.
    pub step: u64,
    /// The metrics saved with it.
    pub metrics: BTreeMap<String, f64>,
}

/// Why the retention policy keeps a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum KeptBy {
    /// It is the newest checkpoint (always kept, so training can resume).
    Newest,
    /// It is among the last N checkpoints ([`Retention::keep_last`]).
    Last(usize),
    /// Its step is a multiple of K ([`Retention::keep_every`]).
    Every(u64),
    /// It is among the best by a metric ([`Retention::keep_best`]).
    Best(KeepBest),
}

impl fmt::Display for KeptBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeptBy::Newest => write!(f, "newest"),
            KeptBy::Last(n) => write!(f, "last {n}"),
            KeptBy::Every(k) => write!(f, "every {k} steps"),
            KeptBy::Best(b) => write!(
                f,
                "best {} {} by {}",
                b.count,
                match b.goal {
                    Goal::Min => "lowest",
                    Goal::Max => "highest",
                },
                b.metric
            ),
        }
    }
}

/// The most removed checkpoints a record lists: the newest this many; older ones are
/// counted in `removed_omitted` (so metadata.json stays small however long a run is).
pub(crate) const MAX_REMOVED_RECORDS: usize = 1000;

/// For each checkpoint (oldest first), the rules of `policy` that keep it; an empty
/// list means the policy drops it. The newest is always kept.
pub(crate) fn decide(ckpts: &[CheckpointRecord], policy: &Retention) -> Vec<Vec<KeptBy>> {
    let mut why: Vec<Vec<KeptBy>> = vec![Vec::new(); ckpts.len()];
    if let Some(last) = why.last_mut() {
        last.push(KeptBy::Newest);
    }
    if let Some(n) = policy.keep_last {
        let from = ckpts.len().saturating_sub(n);
        why.iter_mut()
            .skip(from)
            .for_each(|w| w.push(KeptBy::Last(n)));
    }
    if let Some(k) = policy.keep_every.filter(|k| *k > 0) {
        // (0 is refused by `check_options`; the filter keeps a division by zero impossible)
        for (w, c) in why.iter_mut().zip(ckpts) {
            if c.step % k == 0 {
                w.push(KeptBy::Every(k));
            }
        }
    }
    if let Some(best) = &policy.keep_best {
        let mut scored: Vec<(usize, f64)> = ckpts
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.metrics.get(&best.metric).map(|v| (i, *v)))
            // NaN and ±inf are no candidates (±inf is stored as null: the retention pass
            // after the save, which reads the stored metrics, must decide alike).
            .filter(|(_, v)| v.is_finite())
            .collect();
        scored.sort_by(|a, b| {
            let ord = a.1.total_cmp(&b.1);
            match best.goal {
                Goal::Min => ord,
                Goal::Max => ord.reverse(),
            }
        });
        for (i, _) in scored.into_iter().take(best.count) {
            why[i].push(KeptBy::Best(best.clone()));
        }
    }
    why
}

/// What a checkpoint's `retention` record says: the policy its save ran under and the
/// checkpoints removed by that save and the earlier ones (newest [`MAX_REMOVED_RECORDS`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Record {
    pub policy: Retention,
    pub removed: Vec<CheckpointRecord>,
    pub omitted: u64,
}

impl Record {
    /// Appends `more` to the removed list, keeping the newest [`MAX_REMOVED_RECORDS`].
    pub fn extend(&mut self, more: impl IntoIterator<Item = CheckpointRecord>) {
        self.removed.extend(more);
        let over = self.removed.len().saturating_sub(MAX_REMOVED_RECORDS);
        if over > 0 {
            self.removed.drain(..over);
            self.omitted = self.omitted.saturating_add(over as u64);
        }
    }

    pub fn to_json(&self) -> Value {
        let p = &self.policy;
        json!({
            "keep_last": p.keep_last,
            "keep_every": p.keep_every,
            "keep_best": p.keep_best.as_ref().map(|b| json!({
                "metric": b.metric,
                "goal": goal_name(b.goal),
                "count": b.count,
            })),
            "removed": self.removed.iter().map(record_json).collect::<Vec<_>>(),
            "removed_omitted": self.omitted,
        })
    }

    /// Reads a `retention` record back; `Err` says what is wrong with it.
    pub fn from_json(v: &Value) -> std::result::Result<Record, String> {
        let o = v
            .as_object()
            .ok_or("the \"retention\" record is not an object")?;
        let count = |key: &str| -> std::result::Result<Option<u64>, String> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x
                    .as_u64()
                    .filter(|n| *n > 0)
                    .map(Some)
                    .ok_or_else(|| format!("retention {key:?} is {x}, not a positive integer")),
            }
        };
        let keep_last = count("keep_last")?
            .map(|n| usize::try_from(n).map_err(|_| format!("retention keep_last {n} too large")))
            .transpose()?;
        let keep_every = count("keep_every")?;
        let keep_best = match o.get("keep_best") {
            None | Some(Value::Null) => None,
            Some(b) => Some(keep_best_from(b)?),
        };
        let removed = match o.get("removed") {
            None => Vec::new(),
            Some(Value::Array(list)) => {
                if list.len() > MAX_REMOVED_RECORDS {
                    return Err(format!(
                        "retention \"removed\" lists {} checkpoints, more than the {MAX_REMOVED_RECORDS} \
                         a checkpointer writes",
                        list.len()
                    ));
                }
                list.iter()
                    .enumerate()
                    .map(|(i, r)| {
                        record_from(r).map_err(|e| format!("retention \"removed\"[{i}]: {e}"))
                    })
                    .collect::<std::result::Result<_, _>>()?
            }
            Some(x) => return Err(format!("retention \"removed\" is {x}, not a list")),
        };
        let omitted = o
            .get("removed_omitted")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        Ok(Record {
            policy: Retention {
                keep_last,
                keep_every,
                keep_best,
            },
            removed,
            omitted,
        })
    }
}

fn goal_name(g: Goal) -> &'static str {
    match g {
        Goal::Min => "min",
        Goal::Max => "max",
    }
}

fn keep_best_from(b: &Value) -> std::result::Result<KeepBest, String> {
    let metric = b
        .get("metric")
        .and_then(Value::as_str)
        .ok_or("retention keep_best has no \"metric\" string")?;
    let goal = match b.get("goal").and_then(Value::as_str) {
        Some("min") => Goal::Min,
        Some("max") => Goal::Max,
        _ => return Err("retention keep_best \"goal\" is not \"min\" or \"max\"".into()),
    };
    let count = b
        .get("count")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or("retention keep_best \"count\" is not a positive integer")?;
    Ok(KeepBest {
        metric: metric.to_string(),
        count,
        goal,
    })
}

pub(crate) fn record_json(r: &CheckpointRecord) -> Value {
    json!({"tag": r.tag, "step": r.step, "metrics": r.metrics})
}

fn record_from(v: &Value) -> std::result::Result<CheckpointRecord, String> {
    let tag = v
        .get("tag")
        .and_then(Value::as_str)
        .ok_or("no \"tag\" string")?;
    let step = v
        .get("step")
        .and_then(Value::as_u64)
        .ok_or("no \"step\" (a non-negative integer)")?;
    Ok(CheckpointRecord {
        tag: tag.to_string(),
        step,
        metrics: metrics_from(v.get("metrics")),
    })
}

/// The numeric entries of a `metrics` object (others are skipped, as every reader does).
pub(crate) fn metrics_from(v: Option<&Value>) -> BTreeMap<String, f64> {
    v.and_then(Value::as_object)
        .map(|m: &Map<String, Value>| {
            m.iter()
                .filter_map(|(k, x)| x.as_f64().map(|f| (k.clone(), f)))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tag: &str, step: u64, loss: f64) -> CheckpointRecord {
        CheckpointRecord {
            tag: tag.into(),
            step,
            metrics: [("loss".to_string(), loss)].into(),
        }
    }

    #[test]
    fn each_rule_says_why_it_keeps() {
        let ckpts = [
            rec("a", 100, 0.5),
            rec("b", 200, 0.1),
            rec("c", 300, 0.4),
            rec("d", 400, 0.3),
        ];
        let best = KeepBest {
            metric: "loss".into(),
            count: 1,
            goal: Goal::Min,
        };
        let policy = Retention {
            keep_last: Some(2),
            keep_every: Some(400),
            keep_best: Some(best.clone()),
        };
        let why = decide(&ckpts, &policy);
        assert_eq!(why[0], []);
        assert_eq!(why[1], [KeptBy::Best(best)]);
        assert_eq!(why[2], [KeptBy::Last(2)]);
        assert_eq!(
            why[3],
            [KeptBy::Newest, KeptBy::Last(2), KeptBy::Every(400)]
        );
        assert_eq!(why[3][2].to_string(), "every 400 steps");
        assert_eq!(why[1][0].to_string(), "best 1 lowest by loss");
    }

    #[test]
    fn records_round_trip_and_stay_bounded() {
        let mut r = Record {
            policy: Retention {
                keep_last: Some(3),
                keep_every: None,
                keep_best: Some(KeepBest {
                    metric: "acc".into(),
                    count: 2,
                    goal: Goal::Max,
                }),
            },
            ..Record::default()
        };
        r.extend((0..MAX_REMOVED_RECORDS as u64 + 5).map(|s| rec(&format!("t{s}"), s, 1.0)));
        assert_eq!(r.removed.len(), MAX_REMOVED_RECORDS);
        assert_eq!(r.omitted, 5);
        assert_eq!(r.removed[0].step, 5);
        assert_eq!(Record::from_json(&r.to_json()).unwrap(), r);
    }

    #[test]
    fn malformed_records_say_what_is_wrong() {
        let bad = |v: Value| Record::from_json(&v).unwrap_err();
        assert!(bad(json!(3)).contains("not an object"));
        assert!(bad(json!({"keep_last": 0})).contains("keep_last"));
        assert!(
            bad(json!({"keep_best": {"metric": "x", "goal": "up", "count": 1}})).contains("goal")
        );
        assert!(bad(json!({"removed": [{"step": 1}]})).contains("\"removed\"[0]: no \"tag\""));
        assert!(bad(json!({"removed": "x"})).contains("not a list"));
    }
}
