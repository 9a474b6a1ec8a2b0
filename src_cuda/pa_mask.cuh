// portattn masking: which keys each query row sees. Shared by every kernel family.
//
// Causal masks are upper-left aligned (SDPA's is_causal): key j is visible to query row i when j <= i, also when
// the query and key lengths differ. Keys at or past seqlen_k are never visible (tiles are padded with them).
//   pa_mask_key_end(m, row)                  the keys row sees are [0, end)
//   pa_mask_rows_key_end(m, row0, rows)      the keys any of rows [row0, row0 + rows) sees are [0, end)
//   pa_mask_tile_partial(m, row0, n0, cols)  whether the key tile [n0, n0 + cols) hides a key from some row at or
//                                            after row0 (the tile then needs per-element masking)
//   pa_mask_first_row(m, n0)                 the first query row that sees any key at or after n0
#pragma once

#include "pa_prelude.cuh"

struct PaMask {
    int seqlen_k;
    int causal;
};

PA_DEVICE int pa_mask_key_end(const PaMask& m, int row) { return m.causal ? min(m.seqlen_k, row + 1) : m.seqlen_k; }
PA_DEVICE int pa_mask_rows_key_end(const PaMask& m, int row0, int rows) {
    return m.causal ? min(m.seqlen_k, row0 + rows) : m.seqlen_k;
}
PA_DEVICE bool pa_mask_tile_partial(const PaMask& m, int row0, int n0, int cols) {
    return n0 + cols > m.seqlen_k || (m.causal && n0 + cols - 1 > row0);
}
PA_DEVICE int pa_mask_first_row(const PaMask& m, int n0) { return m.causal ? n0 : 0; }
