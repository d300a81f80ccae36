//! `hetsched matrows` (hidden): the chunk program of the divisible-load demo and tests — rows
//! `[start, end)` of the product `C = A·B`, one row at a time with faer (`c_i = a_i·B`, the same
//! 1×n by n×n product for every row, so a row's bytes do not depend on how the rows were cut into
//! chunks). `A`'s rows come from `--input` (little-endian `f64`, `cols` per row: exactly the rows
//! of the chunk); `B` is a fixed pseudo-random `cols × cols` matrix; `C`'s rows go to stdout, in
//! the same format.
//!
//! To emulate nodes of different speeds on one machine, each row also waits `--row-ms`
//! milliseconds times `HETSCHED_MATROWS_SLOWDOWN` (an agent's environment, default 1): a sleep, not
//! busy work, so the speed ratio holds on a shared, loaded machine.

use anyhow::{Context, bail};
use clap::Args;
use faer::Mat;
use std::io::{Read, Write};
use std::path::PathBuf;

/// `hetsched matrows`.
#[derive(Debug, Args)]
pub struct MatRowsArgs {
    /// First row (the chunk's `{start}`).
    #[arg(long)]
    pub start: u64,
    /// One past the last row (`{end}`).
    #[arg(long)]
    pub end: u64,
    /// The chunk's rows of A (`{input}`).
    #[arg(long)]
    pub input: PathBuf,
    /// Columns of A, and the order of B.
    #[arg(long, default_value_t = 32)]
    pub cols: usize,
    /// Emulated cost of one row, milliseconds (times `HETSCHED_MATROWS_SLOWDOWN`).
    #[arg(long, default_value_t = 0.0)]
    pub row_ms: f64,
}

/// The fixed right-hand matrix B of order `n`.
pub fn matrix_b(n: usize) -> Mat<f64> {
    let mut state = 0x2545_F491_4F6C_DD1Du64 ^ n as u64;
    Mat::<f64>::from_fn(n, n, |_, _| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    })
}

/// Rows of `A` (row-major little-endian f64, `n` per row) times B, as the same bytes.
pub fn product_rows(a: &[u8], n: usize) -> anyhow::Result<Vec<u8>> {
    if n == 0 || !a.len().is_multiple_of(8 * n) {
        bail!("the input is {} bytes, not whole rows of {n} f64", a.len());
    }
    let b = matrix_b(n);
    let rows = a.len() / (8 * n);
    let mut out = Vec::with_capacity(a.len());
    for r in 0..rows {
        let row = Mat::<f64>::from_fn(1, n, |_, j| {
            let k = (r * n + j) * 8;
            f64::from_le_bytes(a[k..k + 8].try_into().unwrap_or([0; 8]))
        });
        let c = &row * &b;
        for j in 0..n {
            out.extend_from_slice(&c[(0, j)].to_le_bytes());
        }
    }
    Ok(out)
}

/// Runs one chunk.
pub fn run(args: &MatRowsArgs) -> anyhow::Result<()> {
    faer::set_global_parallelism(faer::Par::Seq);
    if args.end < args.start {
        bail!("--end {} is before --start {}", args.end, args.start);
    }
    let mut a = Vec::new();
    std::fs::File::open(&args.input)
        .and_then(|mut f| f.read_to_end(&mut a))
        .with_context(|| format!("reading {}", args.input.display()))?;
    let rows = (args.end - args.start) as usize;
    let need = rows * args.cols * 8;
    if a.len() < need {
        bail!(
            "{} holds {} bytes; rows {}..{} need {need}",
            args.input.display(),
            a.len(),
            args.start,
            args.end
        );
    }
    a.truncate(need);
    let slowdown: f64 = std::env::var("HETSCHED_MATROWS_SLOWDOWN")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let c = product_rows(&a, args.cols)?;
    let wait = args.row_ms * slowdown * rows as f64;
    if wait > 0.0 {
        std::thread::sleep(std::time::Duration::from_secs_f64(wait / 1e3));
    }
    std::io::stdout().lock().write_all(&c)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_computed_apart_equal_rows_computed_together() {
        let n = 8;
        let a: Vec<u8> = (0..5 * n)
            .flat_map(|k| (k as f64 * 0.37 - 3.0).to_le_bytes())
            .collect();
        let whole = product_rows(&a, n).expect("whole");
        let first = product_rows(&a[..2 * n * 8], n).expect("first");
        let rest = product_rows(&a[2 * n * 8..], n).expect("rest");
        assert_eq!([first, rest].concat(), whole);
        // Row 0 checked by hand against B.
        let b = matrix_b(n);
        let c00: f64 = (0..n).map(|j| (j as f64 * 0.37 - 3.0) * b[(j, 0)]).sum();
        let got = f64::from_le_bytes(whole[..8].try_into().expect("8 bytes"));
        assert!((got - c00).abs() < 1e-12);
    }
}
