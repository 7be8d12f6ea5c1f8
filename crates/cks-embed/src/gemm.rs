//! Matrix products for the transformer: matrixmultiply's `sgemm` (SIMD kernels chosen at run
//! time, AVX-512 included) behind a safe call that checks every view against its slice, for
//! attention; and [`Packed`] weights, multiplied by a kernel of our own, for the linear layers.
//!
//! `sgemm` copies both its operands into its own layout at every call: for a query's few rows,
//! copying a weight matrix costs more than the product. A [`Packed`] matrix is laid out once, as
//! it is read, and each product streams it.
//!
//! This is the workspace's one module with `unsafe` code: `sgemm` takes raw pointers and
//! strides, and [`Packed::multiply`] calls a copy of its code compiled for the processor's
//! vector instructions once it has checked that the processor has them.
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

/// Output columns a block of [`Packed`] holds: 64 floats, four 512-bit registers.
const COLUMNS: usize = 64;

/// Rows [`Packed::multiply`] computes at a time: with [`COLUMNS`], sixteen 512-bit accumulators.
const ROWS: usize = 4;

/// A weight matrix laid out for [`Packed::multiply`]: blocks of [`COLUMNS`] columns, each block
/// `k` rows of [`COLUMNS`] floats one after another (the last block padded with zeros), so that a
/// product reads each block as one stream.
#[derive(Debug)]
pub(crate) struct Packed {
    k: usize,
    n: usize,
    blocks: Vec<f32>,
}

impl Packed {
    /// `W` of `k × n` from its transpose as stored, `n × k` row after row (a linear layer's
    /// `outputs × inputs`).
    pub(crate) fn from_transposed(stored: &[f32], n: usize, k: usize) -> Packed {
        assert_eq!(stored.len(), n * k, "a slice of its shape");
        let count = n.div_ceil(COLUMNS);
        let mut blocks = vec![0f32; count * k * COLUMNS];
        for (column, row) in stored.chunks_exact(k).enumerate() {
            let (block, j) = (column / COLUMNS, column % COLUMNS);
            for (i, w) in row.iter().enumerate() {
                blocks[(block * k + i) * COLUMNS + j] = *w;
            }
        }
        Packed { k, n, blocks }
    }

    /// `out += x · W` for `x` of `rows × k`, `out` of `rows × n`, both row after row.
    pub(crate) fn multiply(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        assert!(x.len() >= rows * self.k && out.len() >= rows * self.n, "slices shorter than their shapes");
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the processor has the instructions the copy was compiled for (checked
                // above); the copy is the portable code, which indexes only checked slices.
                return unsafe { multiply_avx512(self, x, rows, out) };
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                // SAFETY: as above.
                return unsafe { multiply_avx2(self, x, rows, out) };
            }
        }
        multiply_portable(self, x, rows, out);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn multiply_avx512(w: &Packed, x: &[f32], rows: usize, out: &mut [f32]) {
    multiply_portable(w, x, rows, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn multiply_avx2(w: &Packed, x: &[f32], rows: usize, out: &mut [f32]) {
    multiply_portable(w, x, rows, out);
}

/// Block by block of columns (a block stays in cache while every row passes), [`ROWS`] rows at
/// a time summed over `k` in registers; written so that the compiler vectorises it for whatever
/// the caller was compiled for.
#[inline(always)]
fn multiply_portable(w: &Packed, x: &[f32], rows: usize, out: &mut [f32]) {
    let groups = interleaved(x, rows, w.k);
    for (index, block) in w.blocks.chunks_exact(w.k * COLUMNS).enumerate() {
        let column = index * COLUMNS;
        let width = (w.n - column).min(COLUMNS);
        let (block, _) = block.as_chunks::<COLUMNS>();
        for (group, inputs) in groups.chunks_exact(w.k).enumerate() {
            let sums = block_sums(block, inputs);
            let start = group * ROWS;
            for (r, sum) in sums.iter().enumerate().take(rows - start) {
                let row = &mut out[(start + r) * w.n + column..][..width];
                row.iter_mut().zip(sum).for_each(|(o, s)| *o += s);
            }
        }
    }
}

/// `x`'s rows in groups of [`ROWS`], each group `k` elements of its rows side by side (element
/// `i` of each row, then `i + 1`), the last group padded with rows of zeros.
fn interleaved(x: &[f32], rows: usize, k: usize) -> Vec<[f32; ROWS]> {
    let mut groups = vec![[0f32; ROWS]; rows.div_ceil(ROWS) * k];
    for (row, values) in x.chunks_exact(k).take(rows).enumerate() {
        let group = &mut groups[row / ROWS * k..][..k];
        for (element, value) in group.iter_mut().zip(values) {
            element[row % ROWS] = *value;
        }
    }
    groups
}

/// One block of columns times one group of rows. Both are walked by iterators, so the loop has
/// no bounds checks: a check's exit would make the compiler keep the sums in memory, storing
/// them at every step.
#[inline(always)]
fn block_sums(block: &[[f32; COLUMNS]], inputs: &[[f32; ROWS]]) -> [[f32; COLUMNS]; ROWS] {
    let mut sums = [[0f32; COLUMNS]; ROWS];
    for (weights, a) in block.iter().zip(inputs) {
        for r in 0..ROWS {
            for j in 0..COLUMNS {
                sums[r][j] = a[r].mul_add(weights[j], sums[r][j]);
            }
        }
    }
    sums
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
    fn packed_products_agree_with_sgemm() {
        // Shapes with a partial block of rows and of columns.
        for (rows, k, n) in [(1, 3, 2), (5, 7, 130), (4, 64, 64), (9, 33, 200)] {
            let x: Vec<f32> = (0..rows * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
            // W as a linear layer stores it: n × k.
            let stored: Vec<f32> = (0..n * k).map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0).collect();
            let mut expected = vec![1.0; rows * n];
            let w = View::rows(&stored, n, k).t();
            multiply(View::rows(&x, rows, k), w, 1.0, ViewMut::rows(&mut expected, rows, n));
            let mut found = vec![1.0; rows * n];
            Packed::from_transposed(&stored, n, k).multiply(&x, rows, &mut found);
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
