//! TrainingConfig: the updater and its hyper-parameters, stored as trainingConfig.fb.
/// x
pub struct TrainingConfig;
/// x
pub struct HyperParam;
/// x
pub struct Regularization;
