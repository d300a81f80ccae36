//! `hetsched kernel`: the demo's task program — one dense linear solve with faer (LU with partial
//! pivoting, QR least squares, or Cholesky), single-threaded, on a random well-conditioned matrix.
//! Prints the residual and the time, and which device it was given: on a machine without GPUs the
//! demo's "GPU" variant runs this same CPU kernel with `CUDA_VISIBLE_DEVICES` set, and says so.

use anyhow::bail;
use clap::{Args, ValueEnum};
use faer::Mat;
use faer::prelude::*;
use std::time::Instant;

/// Which factorisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// LU with partial pivoting.
    Lu,
    /// Householder QR (least squares).
    Qr,
    /// Cholesky (the matrix is made symmetric positive definite).
    Cholesky,
}

/// `hetsched kernel`.
#[derive(Debug, Args)]
pub struct KernelArgs {
    /// The factorisation.
    pub kind: Kind,
    /// Matrix order.
    #[arg(long, default_value_t = 1000)]
    pub n: usize,
}

/// Runs one solve; returns its wall time in seconds.
pub fn solve(kind: Kind, n: usize) -> anyhow::Result<f64> {
    faer::set_global_parallelism(faer::Par::Seq);
    // A cheap deterministic pseudo-random fill, diagonally dominant so every kernel is stable.
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let mut a = Mat::<f64>::from_fn(n, n, |_, _| next());
    for i in 0..n {
        a[(i, i)] += n as f64;
    }
    if kind == Kind::Cholesky {
        a = &a + a.transpose();
    }
    let b = Mat::<f64>::from_fn(n, 1, |i, _| i as f64 / n as f64);
    let start = Instant::now();
    let x = match kind {
        Kind::Lu => a.partial_piv_lu().solve(&b),
        Kind::Qr => a.qr().solve_lstsq(&b),
        Kind::Cholesky => match a.llt(faer::Side::Lower) {
            Ok(llt) => llt.solve(&b),
            Err(e) => bail!("Cholesky: {e:?}"),
        },
    };
    let elapsed = start.elapsed().as_secs_f64();
    let residual = (&a * &x - &b).norm_l2() / b.norm_l2().max(f64::MIN_POSITIVE);
    if residual.is_nan() || residual >= 1e-6 {
        bail!("residual {residual:e} too large");
    }
    Ok(elapsed)
}

/// Runs the kernel and prints what it did.
pub fn run(args: &KernelArgs) -> anyhow::Result<()> {
    let secs = solve(args.kind, args.n)?;
    let device = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(d) if !d.is_empty() => {
            format!("GPU variant on device(s) {d} (simulated: this build runs the CPU kernel)")
        }
        _ => "CPU".to_string(),
    };
    println!(
        "{:?} solve, n = {}, {:.3}s, on {} (node {})",
        args.kind,
        args.n,
        secs,
        device,
        std::env::var("HETSCHED_NODE").unwrap_or_else(|_| "-".into())
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_solves_its_system() {
        for kind in [Kind::Lu, Kind::Qr, Kind::Cholesky] {
            let secs = solve(kind, 60).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert!(secs >= 0.0);
        }
    }
}
