//! How the rows of a grouped call are routed to experts: the two call forms engines use
//! (contiguous, by offsets or by per-row expert ids; masked, by per-expert counts), their
//! checks, and the row segments each expert runs.

use std::ops::Range;

/// The routing of one grouped call: which rows of the input each expert computes.
///
/// The input is 2-D in both forms: contiguous `[M_sum, K]`, masked the `[E * M_max, K]`
/// view of the `[E, M_max, K]` stack (expert `e`'s slab is rows `e * M_max ..`). The output
/// has the input's rows (`[M_sum, N]`, `[E * M_max, N]`). Rows no expert owns (padding:
/// past the last offset, id `-1`, past an expert's count) are left as they were.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Routing<'a> {
    /// Contiguous, rows sorted by expert: expert `e` owns rows `offsets[e]..offsets[e + 1]`;
    /// `E + 1` offsets, non-decreasing, the last at most `M_sum` (prefill).
    Offsets(&'a [usize]),
    /// Contiguous, by row: row `i` belongs to expert `ids[i]`, or to none when it is `-1`
    /// (padding rows); `M_sum` ids. Rows of one expert are best kept together (each run of
    /// one id is one GEMM).
    ExpertIds(&'a [i32]),
    /// Masked: expert `e` owns the first `counts[e]` rows of its slab of `M_max` rows; `E`
    /// counts, each at most `M_max` (decode: fixed shapes, CUDA-graph friendly).
    Masked(&'a [usize]),
}

/// What is wrong with the routing of a grouped call (see [`Routing`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RoutingError {
    /// A per-expert list (offsets, counts) of the wrong length for the layer's experts.
    #[error("{what}: expected {expected} entries for {experts} experts, got {got}")]
    ExpertCount {
        /// `offsets` (E + 1 entries) or `counts` (E).
        what: &'static str,
        /// The layer's experts.
        experts: usize,
        /// Entries expected.
        expected: usize,
        /// Entries given.
        got: usize,
    },
    /// A per-row list (expert ids, routing weights) of another length than the call's rows.
    #[error("{what}: expected one per row ({rows}), got {got}")]
    RowCount {
        /// `expert ids` or `routing weights`.
        what: &'static str,
        /// The rows of the input.
        rows: usize,
        /// Entries given.
        got: usize,
    },
    /// Offsets that go down: expert `expert` would start after it ends.
    #[error("offsets out of order: expert {expert} starts at row {start} but ends at row {end}")]
    OffsetsOutOfOrder {
        /// The expert.
        expert: usize,
        /// `offsets[expert]`.
        start: usize,
        /// `offsets[expert + 1]`.
        end: usize,
    },
    /// An offset past the input's rows.
    #[error("offset {index} is {offset}, past the input's {rows} rows")]
    OffsetPastRows {
        /// Its index in `offsets`.
        index: usize,
        /// Its value.
        offset: usize,
        /// The rows of the input.
        rows: usize,
    },
    /// A masked count above the rows of an expert's slab.
    #[error("count of expert {expert} is {count}, above M_max = {m_max}")]
    CountAboveMax {
        /// The expert.
        expert: usize,
        /// Its count.
        count: usize,
        /// The rows of each expert's slab.
        m_max: usize,
    },
    /// A masked input whose rows are not a multiple of the experts (not an `[E, M_max, K]`
    /// stack).
    #[error("masked input of {rows} rows is not [E = {experts}, M_max, K] (rows must be a multiple of E)")]
    MaskedRows {
        /// The rows of the input.
        rows: usize,
        /// The layer's experts.
        experts: usize,
    },
    /// An expert id that is neither `-1` nor an expert of the layer.
    #[error("expert id {id} of row {row} is out of range: the layer has experts 0..{experts} (-1 marks a padding row)")]
    ExpertIdOutOfRange {
        /// The row.
        row: usize,
        /// Its id.
        id: i32,
        /// The layer's experts.
        experts: usize,
    },
}

impl Routing<'_> {
    /// The call form's name: `offsets`, `expert ids` or `masked`.
    pub const fn name(&self) -> &'static str {
        match self {
            Routing::Offsets(_) => "offsets",
            Routing::ExpertIds(_) => "expert ids",
            Routing::Masked(_) => "masked",
        }
    }

    /// Checks the routing of a call of `rows` input rows against a layer of `experts`
    /// experts: every list has its length, offsets are in order and inside the rows, counts
    /// at most `M_max`, ids in range. After it, [`Routing::segments`] stays inside the rows.
    pub fn check(&self, experts: usize, rows: usize) -> Result<(), RoutingError> {
        let per_expert = |what, expected, got| {
            if got == expected {
                Ok(())
            } else {
                Err(RoutingError::ExpertCount {
                    what,
                    experts,
                    expected,
                    got,
                })
            }
        };
        match *self {
            Routing::Offsets(offsets) => {
                per_expert("offsets", experts + 1, offsets.len())?;
                for (index, &offset) in offsets.iter().enumerate() {
                    if offset > rows {
                        return Err(RoutingError::OffsetPastRows {
                            index,
                            offset,
                            rows,
                        });
                    }
                }
                for (expert, w) in offsets.windows(2).enumerate() {
                    if w[0] > w[1] {
                        return Err(RoutingError::OffsetsOutOfOrder {
                            expert,
                            start: w[0],
                            end: w[1],
                        });
                    }
                }
            }
            Routing::ExpertIds(ids) => {
                if ids.len() != rows {
                    return Err(RoutingError::RowCount {
                        what: "expert ids",
                        rows,
                        got: ids.len(),
                    });
                }
                for (row, &id) in ids.iter().enumerate() {
                    if id < -1 || id >= 0 && id as usize >= experts {
                        return Err(RoutingError::ExpertIdOutOfRange { row, id, experts });
                    }
                }
            }
            Routing::Masked(counts) => {
                per_expert("counts", experts, counts.len())?;
                let m_max = masked_rows(experts, rows)?;
                for (expert, &count) in counts.iter().enumerate() {
                    if count > m_max {
                        return Err(RoutingError::CountAboveMax {
                            expert,
                            count,
                            m_max,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The rows each expert computes, as `(expert, rows of the 2-D input)`, in row order,
    /// without empty segments; allocates nothing. Call after [`Routing::check`] (with the
    /// same `experts` and `rows`).
    pub fn segments(&self, experts: usize, rows: usize) -> Segments<'_> {
        Segments {
            routing: *self,
            m_max: rows.checked_div(experts).unwrap_or(0),
            next: 0,
        }
    }
}

/// `M_max` of a masked input of `rows` rows for `experts` experts.
pub(crate) fn masked_rows(experts: usize, rows: usize) -> Result<usize, RoutingError> {
    if experts == 0 || !rows.is_multiple_of(experts) {
        return Err(RoutingError::MaskedRows { rows, experts });
    }
    Ok(rows / experts)
}

/// The iterator of [`Routing::segments`].
#[derive(Clone, Debug)]
pub struct Segments<'a> {
    routing: Routing<'a>,
    m_max: usize,
    /// The next expert (offsets, masked) or row (ids) to look at.
    next: usize,
}

impl Iterator for Segments<'_> {
    type Item = (usize, Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        match self.routing {
            Routing::Offsets(offsets) => {
                while self.next + 1 < offsets.len() {
                    let e = self.next;
                    self.next += 1;
                    if offsets[e] < offsets[e + 1] {
                        return Some((e, offsets[e]..offsets[e + 1]));
                    }
                }
                None
            }
            Routing::ExpertIds(ids) => {
                while self.next < ids.len() {
                    let start = self.next;
                    let id = ids[start];
                    let len = ids[start..].iter().take_while(|&&i| i == id).count();
                    self.next += len;
                    if id >= 0 {
                        return Some((id as usize, start..start + len));
                    }
                }
                None
            }
            Routing::Masked(counts) => {
                while self.next < counts.len() {
                    let e = self.next;
                    self.next += 1;
                    if counts[e] > 0 {
                        let start = e * self.m_max;
                        return Some((e, start..start + counts[e]));
                    }
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(r: Routing<'_>, experts: usize, rows: usize) -> Vec<(usize, Range<usize>)> {
        r.check(experts, rows).unwrap();
        r.segments(experts, rows).collect()
    }

    #[test]
    fn each_form_gives_its_segments() {
        assert_eq!(
            segs(Routing::Offsets(&[0, 2, 2, 5]), 3, 6),
            [(0, 0..2), (2, 2..5)]
        );
        assert_eq!(
            segs(Routing::ExpertIds(&[1, 1, -1, 0, 1, -1]), 2, 6),
            [(1, 0..2), (0, 3..4), (1, 4..5)]
        );
        assert_eq!(
            segs(Routing::Masked(&[1, 0, 3]), 3, 9),
            [(0, 0..1), (2, 6..9)]
        );
    }

    #[test]
    fn bad_routing_is_named() {
        let e = |r: Routing<'_>, experts, rows| r.check(experts, rows).unwrap_err();
        assert!(matches!(
            e(Routing::Offsets(&[0, 3, 2]), 2, 4),
            RoutingError::OffsetsOutOfOrder {
                expert: 1,
                start: 3,
                end: 2
            }
        ));
        assert!(matches!(
            e(Routing::Offsets(&[0, 2, 9]), 2, 4),
            RoutingError::OffsetPastRows {
                index: 2,
                offset: 9,
                rows: 4
            }
        ));
        assert!(matches!(
            e(Routing::Offsets(&[0, 2]), 2, 4),
            RoutingError::ExpertCount {
                what: "offsets",
                expected: 3,
                got: 2,
                ..
            }
        ));
        assert!(matches!(
            e(Routing::Masked(&[1, 5]), 2, 8),
            RoutingError::CountAboveMax {
                expert: 1,
                count: 5,
                m_max: 4
            }
        ));
        assert!(matches!(
            e(Routing::Masked(&[1, 1]), 2, 7),
            RoutingError::MaskedRows { rows: 7, .. }
        ));
        assert!(matches!(
            e(Routing::ExpertIds(&[0, 2]), 2, 2),
            RoutingError::ExpertIdOutOfRange { row: 1, id: 2, .. }
        ));
        assert!(matches!(
            e(Routing::ExpertIds(&[0, -2]), 2, 2),
            RoutingError::ExpertIdOutOfRange { id: -2, .. }
        ));
        assert!(matches!(
            e(Routing::ExpertIds(&[0]), 2, 2),
            RoutingError::RowCount { got: 1, .. }
        ));
        let msg = e(Routing::Offsets(&[0, 3, 2]), 2, 4).to_string();
        assert_eq!(
            msg,
            "offsets out of order: expert 1 starts at row 3 but ends at row 2"
        );
    }
}
