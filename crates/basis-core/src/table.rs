//! The caller's embedding table: [`RowAccess`] and the dense [`DenseTable`].

use crate::error::TableError;

/// Mutable access to the rows of the caller's embedding table.
///
/// The optimizer never owns the parameters: it asks for row `id` while it
/// applies a step. `row_mut` returns `None` for an id the table does not hold;
/// the step then fails with [`StepError::MissingRow`](crate::StepError::MissingRow)
/// before anything changes.
///
/// A table of your own, here rows kept in a map by id:
///
/// ```
/// use std::collections::BTreeMap;
/// use basis_core::{Basis, BasisConfig, OneChoice, RowAccess, RowIndex, SparseOptimizer};
///
/// struct MapTable {
///     dim: usize,
///     rows: BTreeMap<u64, Vec<f32>>,
/// }
///
/// impl RowAccess for MapTable {
///     fn dim(&self) -> usize {
///         self.dim
///     }
///     fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
///         self.rows.get_mut(&id).map(Vec::as_mut_slice)
///     }
/// }
///
/// let mut table = MapTable { dim: 2, rows: BTreeMap::new() };
/// table.rows.insert(1 << 40, vec![1.0, -1.0]);
/// let config = BasisConfig::row_scaled(2).row_index(RowIndex::Sparse).build()?;
/// let mut opt = Basis::new(config, OneChoice::new(8, 3)?)?;
/// opt.step(&[1 << 40], &[0.5, -0.5], &mut table)?;
/// assert!(table.rows[&(1 << 40)][0] < 1.0);
/// // An id the table does not hold is an error, and nothing changes.
/// assert!(opt.step(&[7], &[0.5, -0.5], &mut table).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait RowAccess {
    /// Number of `f32` values per row.
    fn dim(&self) -> usize;
    /// Row `id` (`dim()` values), or `None` if the table has no such row.
    fn row_mut(&mut self, id: u64) -> Option<&mut [f32]>;
}

/// A dense row-major table over a caller's slice: row `i` is
/// `data[i*dim .. (i+1)*dim]`.
///
/// ```
/// use basis_core::DenseTable;
///
/// let mut data = vec![0.0f32; 6];
/// let table = DenseTable::new(&mut data, 3)?;
/// assert_eq!(table.rows(), 2);
/// assert_eq!(table.row(1), Some(&[0.0f32, 0.0, 0.0][..]));
/// assert!(DenseTable::new(&mut [0.0f32; 5], 3).is_err()); // not a multiple of dim
/// # Ok::<(), basis_core::TableError>(())
/// ```
#[derive(Debug)]
pub struct DenseTable<'a> {
    data: &'a mut [f32],
    dim: usize,
}

impl<'a> DenseTable<'a> {
    /// Wraps `data` as rows of `dim` values.
    ///
    /// # Errors
    /// [`TableError::ZeroDim`] if `dim == 0`, [`TableError::Ragged`] if
    /// `data.len()` is not a multiple of `dim`.
    pub fn new(data: &'a mut [f32], dim: usize) -> Result<Self, TableError> {
        if dim == 0 {
            return Err(TableError::ZeroDim);
        }
        if !data.len().is_multiple_of(dim) {
            return Err(TableError::Ragged {
                len: data.len(),
                dim,
            });
        }
        Ok(Self { data, dim })
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.data.len() / self.dim
    }

    /// The whole row-major slice (for a step that carves rows out itself,
    /// e.g. [`ExactAdam::step_dense_with`](crate::ExactAdam::step_dense_with)).
    pub(crate) fn data_mut(&mut self) -> &mut [f32] {
        self.data
    }

    /// Row `id` read-only, or `None` when out of range.
    pub fn row(&self, id: u64) -> Option<&[f32]> {
        let i = usize::try_from(id).ok()?;
        let start = i.checked_mul(self.dim)?;
        self.data.get(start..start.checked_add(self.dim)?)
    }
}

impl RowAccess for DenseTable<'_> {
    fn dim(&self) -> usize {
        self.dim
    }

    fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
        let i = usize::try_from(id).ok()?;
        let start = i.checked_mul(self.dim)?;
        self.data.get_mut(start..start.checked_add(self.dim)?)
    }
}
