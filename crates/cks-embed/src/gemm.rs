//! Matrix products for the transformer: matrixmultiply's `sgemm` (SIMD kernels chosen at run
//! time, AVX-512 included) behind a safe call that checks every view against its slice, and
//! [`few_rows`], for products of a few rows (a query's tokens) by a weight matrix.
//!
//! This is the workspace's one module with `unsafe` code: `sgemm` takes raw pointers and
//! strides, and [`few_rows`] calls a copy of itself compiled for the processor's vector
//! instructions once it has checked that the processor has them.
#![allow(unsafe_code)]

/// A matrix in a slice: element (i, j) is `data[i * row_stride + j * col_stride]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> View<'a> {
    /// `rows × cols`, row after row.
    pub(crate) fn rows(data: &'a [f32], rows: usize, cols: usize) -> View<'a> {
        View::strided(data, rows, cols, cols, 1)
    }

    /// Panics when an element lies outside `data`: a caller's bug, never the input's.
    pub(crate) fn strided(data: &'a [f32], rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> View<'a> {
        assert!(fits(data.len(), rows, cols, row_stride, col_stride), "a {rows}×{cols} view outside its slice");
        View { data, rows, cols, row_stride, col_stride }
    }

    /// The transpose, with no copy.
    pub(crate) fn t(self) -> View<'a> {
        View { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
    }
}

/// A matrix written in place, laid out as a [`View`].
#[derive(Debug)]
pub(crate) struct ViewMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a> ViewMut<'a> {
    /// `rows × cols`, each row `row_stride` after the last. Panics as [`View::strided`] does.
    pub(crate) fn strided(data: &'a mut [f32], rows: usize, cols: usize, row_stride: usize) -> ViewMut<'a> {
        assert!(fits(data.len(), rows, cols, row_stride, 1), "a {rows}×{cols} view outside its slice");
        ViewMut { data, rows, cols, row_stride }
    }

    pub(crate) fn rows(data: &'a mut [f32], rows: usize, cols: usize) -> ViewMut<'a> {
        ViewMut::strided(data, rows, cols, cols)
    }
}

fn fits(len: usize, rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> bool {
    rows == 0 || cols == 0 || (rows - 1) * row_stride + (cols - 1) * col_stride < len
}

/// `c = a · b + beta · c`. Panics when the shapes do not chain.
pub(crate) fn multiply(a: View<'_>, b: View<'_>, beta: f32, c: ViewMut<'_>) {
    assert!(a.cols == b.rows && a.rows == c.rows && b.cols == c.cols, "shapes that do not chain");
    if c.rows == 0 || c.cols == 0 {
        return;
    }
    if a.cols == 0 {
        for row in 0..c.rows {
            c.data[row * c.row_stride..][..c.cols].iter_mut().for_each(|v| *v *= beta);
        }
        return;
    }
    // SAFETY: each view was checked to lie inside its slice (`fits`), the shapes chain (above),
    // and `c` is borrowed mutably, so it overlaps neither `a` nor `b`.
    unsafe {
        matrixmultiply::sgemm(
            a.rows,
            a.cols,
            b.cols,
            1.0,
            a.data.as_ptr(),
            a.row_stride as isize,
            a.col_stride as isize,
            b.data.as_ptr(),
            b.row_stride as isize,
            b.col_stride as isize,
            beta,
            c.data.as_mut_ptr(),
            c.row_stride as isize,
            1,
        );
    }
}

/// Output columns [`few_rows`] computes at a time: 64 floats, four 512-bit registers.
const COLUMNS: usize = 64;

/// Rows [`few_rows`] computes at a time: with [`COLUMNS`], sixteen 512-bit accumulators.
const ROWS: usize = 4;

/// `out += x · w` for `x` of `rows × k` and `w` of `k × n`, all row after row. Where `sgemm`
/// copies `w` into its own layout at every call, this reads it once, in place: for a few rows
/// the copy would cost more than the product.
pub(crate) fn few_rows(x: &[f32], rows: usize, k: usize, w: &[f32], n: usize, out: &mut [f32]) {
    assert!(x.len() >= rows * k && w.len() >= k * n && out.len() >= rows * n, "slices shorter than their shapes");
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the processor has the instructions the copy was compiled for (checked above).
            return unsafe { few_rows_avx512(x, rows, k, w, n, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: as above.
            return unsafe { few_rows_avx2(x, rows, k, w, n, out) };
        }
    }
    few_rows_portable(x, rows, k, w, n, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn few_rows_avx512(x: &[f32], rows: usize, k: usize, w: &[f32], n: usize, out: &mut [f32]) {
    few_rows_portable(x, rows, k, w, n, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn few_rows_avx2(x: &[f32], rows: usize, k: usize, w: &[f32], n: usize, out: &mut [f32]) {
    few_rows_portable(x, rows, k, w, n, out);
}

/// Blocks of [`ROWS`] × [`COLUMNS`] outputs, each summed over `k` in registers; written so that
/// the compiler vectorises it for whatever the caller was compiled for.
#[inline(always)]
fn few_rows_portable(x: &[f32], rows: usize, k: usize, w: &[f32], n: usize, out: &mut [f32]) {
    let mut start = 0;
    while start < rows {
        let block = (rows - start).min(ROWS);
        match block {
            4 => block_rows::<4>(x, start, k, w, n, out),
            3 => block_rows::<3>(x, start, k, w, n, out),
            2 => block_rows::<2>(x, start, k, w, n, out),
            _ => block_rows::<1>(x, start, k, w, n, out),
        }
        start += block;
    }
}

#[inline(always)]
fn block_rows<const R: usize>(x: &[f32], start: usize, k: usize, w: &[f32], n: usize, out: &mut [f32]) {
    let mut column = 0;
    while column + COLUMNS <= n {
        let mut sums = [[0f32; COLUMNS]; R];
        for i in 0..k {
            let weights: &[f32; COLUMNS] = w[i * n + column..][..COLUMNS].try_into().expect("a full block");
            for (r, sum) in sums.iter_mut().enumerate() {
                let a = x[(start + r) * k + i];
                for (s, w) in sum.iter_mut().zip(weights) {
                    *s = a.mul_add(*w, *s);
                }
            }
        }
        for (r, sum) in sums.iter().enumerate() {
            let row = &mut out[(start + r) * n + column..][..COLUMNS];
            row.iter_mut().zip(sum).for_each(|(o, s)| *o += s);
        }
        column += COLUMNS;
    }
    // The last columns, fewer than a block.
    for r in 0..R {
        for j in column..n {
            let sum: f32 = (0..k).map(|i| x[(start + r) * k + i] * w[i * n + j]).sum();
            out[(start + r) * n + j] += sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_follow_the_views() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2×3
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]; // 3×2
        let mut c = [10.0; 4];
        multiply(View::rows(&a, 2, 3), View::rows(&b, 3, 2), 1.0, ViewMut::rows(&mut c, 2, 2));
        assert_eq!(c, [14.0, 15.0, 20.0, 21.0]);
        // a · aᵀ, the transpose read in place, into the left column of a wider matrix.
        let mut wide = [0.0; 4];
        multiply(View::rows(&a, 2, 3), View::rows(&a, 2, 3).t(), 0.0, ViewMut::strided(&mut wide, 2, 2, 2));
        assert_eq!(wide, [14.0, 32.0, 32.0, 77.0]);
    }

    #[test]
    fn few_rows_agree_with_sgemm() {
        // Shapes with a partial block of rows and of columns.
        for (rows, k, n) in [(1, 3, 2), (5, 7, 130), (4, 64, 64), (9, 33, 200)] {
            let x: Vec<f32> = (0..rows * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
            let w: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0).collect();
            let mut expected = vec![1.0; rows * n];
            multiply(View::rows(&x, rows, k), View::rows(&w, k, n), 1.0, ViewMut::rows(&mut expected, rows, n));
            let mut found = vec![1.0; rows * n];
            few_rows(&x, rows, k, &w, n, &mut found);
            for (e, f) in expected.iter().zip(&found) {
                assert!((e - f).abs() < 1e-4, "{rows}×{k}×{n}: {e} / {f}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "outside its slice")]
    fn a_view_past_its_slice_is_refused() {
        View::strided(&[0.0; 5], 2, 3, 3, 1);
    }
}
