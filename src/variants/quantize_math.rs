//! Symmetric linear INT8 quantization: per tensor or per output channel, round
//! half to even, saturating to [-127, 127].

/// Quantized values and their scales: `real ≈ q × scale[channel]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantized {
    /// One INT8 value per input element.
    pub values: Vec<i8>,
    /// One scale (step size) per channel; one for per-tensor quantization.
    pub scales: Vec<f32>,
}

fn quantize_one(x: f32, scale: f32) -> i8 {
    if scale == 0.0 || !x.is_finite() {
        return 0;
    }
    (x / scale).round_ties_even().clamp(-127.0, 127.0) as i8
}

/// The scale of a tensor (or channel) whose largest finite magnitude is `max_abs`. A
/// `max_abs` below 127 × 2^-150 (≈ 8.9e-44, a few subnormals) would give scale 0 and
/// quantize every value to 0: the smallest subnormal, 2^-149, is used instead, of which
/// every such value is an exact multiple below 64 (so `q × scale` is the value itself).
fn scale_of(max_abs: f32) -> f32 {
    if !max_abs.is_finite() {
        return 0.0;
    }
    let scale = max_abs / 127.0;
    if scale == 0.0 && max_abs > 0.0 {
        f32::from_bits(1)
    } else {
        scale
    }
}

/// Quantizes `values` with one scale for the whole tensor: scale = max|x| / 127.
/// NaN and ±inf quantize to 0 and are left out of max|x|: a caller that must not lose
/// them checks first ([`quantize`](super::quantize) refuses them unless allowed).
pub fn per_tensor(values: &[f32]) -> Quantized {
    let max_abs = values
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |m, v| m.max(v.abs()));
    let scale = scale_of(max_abs);
    Quantized {
        values: values.iter().map(|&x| quantize_one(x, scale)).collect(),
        scales: vec![scale],
    }
}

/// The most per-channel scales an empty tensor gets (64 MiB of them): its dims are not
/// bounded by its data, so a dim of 2^61 beside a 0 would ask for 2^61 scales.
pub(crate) const MAX_EMPTY_CHANNELS: usize = 1 << 24;

/// Quantizes `values` of shape `dims` with one scale per index along `axis`
/// (NaN and ±inf as in [`per_tensor`]).
/// Returns `None` when `axis` is out of range or dims do not match the length.
pub fn per_channel(values: &[f32], dims: &[u64], axis: usize) -> Option<Quantized> {
    let channels = usize::try_from(*dims.get(axis)?).ok()?;
    let inner: usize = dims[axis + 1..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(usize::try_from(d).ok()?))?;
    let total = channels.checked_mul(inner)?;
    let outer: usize = dims[..axis]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(usize::try_from(d).ok()?))?;
    // A dim of 0 elsewhere makes any `channels` match an empty tensor: its scales (one
    // per channel, as for any other) are made only up to a bound.
    if outer.checked_mul(total)? != values.len()
        || (values.is_empty() && channels > MAX_EMPTY_CHANNELS)
    {
        return None;
    }
    let channel_of = |i: usize| (i % total) / inner.max(1);
    let mut max_abs = vec![0f32; channels];
    for (i, v) in values.iter().enumerate() {
        if v.is_finite() {
            let c = channel_of(i);
            max_abs[c] = max_abs[c].max(v.abs());
        }
    }
    let scales: Vec<f32> = max_abs.into_iter().map(scale_of).collect();
    let values = values
        .iter()
        .enumerate()
        .map(|(i, &x)| quantize_one(x, scales[channel_of(i)]))
        .collect();
    Some(Quantized { values, scales })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_tensor_maps_max_to_127() {
        // scale 1.0 makes every quotient exact: ties go to the even neighbour.
        let q = per_tensor(&[127.0, -63.5, 0.0, 0.5, 2.5, -1.5]);
        assert_eq!(q.scales, vec![1.0]);
        assert_eq!(q.values, vec![127, -64, 0, 0, 2, -2]);
    }

    #[test]
    fn saturates_and_handles_zero_and_nan() {
        let q = per_tensor(&[0.0, 0.0]);
        assert_eq!(q.values, vec![0, 0]);
        assert_eq!(q.scales, vec![0.0]);
        let q = per_tensor(&[1.0, f32::NAN, -1.0]);
        assert_eq!(q.values, vec![127, 0, -127]);
    }

    #[test]
    fn per_channel_uses_one_scale_per_index_on_the_axis() {
        // dims [2, 3], axis 1: channels are columns.
        let v = [1.0, 2.0, -4.0, -0.25, 1.5, 1.0];
        let q = per_channel(&v, &[2, 3], 1).unwrap();
        assert_eq!(q.scales, vec![1.0 / 127.0, 2.0 / 127.0, 4.0 / 127.0]);
        assert_eq!(q.values, vec![127, 127, -127, -32, 95, 32]);
        // axis 0: rows.
        let q = per_channel(&v, &[2, 3], 0).unwrap();
        assert_eq!(q.scales, vec![4.0 / 127.0, 1.5 / 127.0]);
        assert_eq!(q.values[2], -127);
        assert!(per_channel(&v, &[2, 3], 2).is_none());
        assert!(per_channel(&v, &[4, 3], 0).is_none());
        // No values: dims that multiply to 0 leave the axis's extent free; no scale
        // per channel is made for them (2^61 of them could not be).
        assert!(per_channel(&[], &[0, 1 << 61], 1).is_none());
    }

    #[test]
    fn tiny_subnormal_ranges_keep_their_values() {
        // max|x| = 63 × 2^-149: max / 127 rounds to 0, which quantized everything to 0.
        let v = [f32::from_bits(5), -f32::from_bits(63), 0.0];
        let q = per_tensor(&v);
        assert_eq!(q.scales, vec![f32::from_bits(1)]);
        assert_eq!(q.values, vec![5, -63, 0]);
        for (x, &qi) in v.iter().zip(&q.values) {
            assert_eq!(f32::from(qi) * q.scales[0], *x);
        }
        let q = per_channel(&[f32::from_bits(2), 1.0], &[1, 2], 1).unwrap();
        assert_eq!(q.scales, vec![f32::from_bits(1), 1.0 / 127.0]);
        assert_eq!(q.values, vec![2, 127]);
    }

    #[test]
    fn error_is_within_half_a_step() {
        let v: Vec<f32> = (0..1000).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let q = per_tensor(&v);
        for (x, &qi) in v.iter().zip(&q.values) {
            assert!((x - f32::from(qi) * q.scales[0]).abs() <= q.scales[0] / 2.0 + 1e-6);
        }
    }
}
