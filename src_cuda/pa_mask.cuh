// portattn masking: which keys each query row sees. Shared by every kernel family.
//
// Key j is visible to query row i when j < seqlen_k and, for causal masks, j <= i + offset: offset 0 aligns the
// diagonal upper-left (SDPA's is_causal), offset = seqlen_k - seqlen_q bottom-right (flash-attn's causal, and
// decoding: the last query row sees every key). Keys at or past seqlen_k are never visible (tiles are padded).
//   pa_mask_key_end(m, row)                  the keys row sees are [0, end) (end may be 0)
//   pa_mask_rows_key_end(m, row0, rows)      the keys any of rows [row0, row0 + rows) sees are [0, end)
//   pa_mask_tile_partial(m, row0, n0, cols)  whether the key tile [n0, n0 + cols) hides a key from some row at or
//                                            after row0 (the tile then needs per-element masking)
//   pa_mask_first_row(m, n0)                 the first query row that sees any key at or after n0
#pragma once

#include "pa_prelude.cuh"

struct PaMask {
    int seqlen_k;
    int causal;
    int offset;  // causal diagonal: key j <= row + offset
};

PA_DEVICE int pa_mask_key_end(const PaMask& m, int row) {
    return m.causal ? max(0, min(m.seqlen_k, row + m.offset + 1)) : m.seqlen_k;
}
PA_DEVICE int pa_mask_rows_key_end(const PaMask& m, int row0, int rows) { return pa_mask_key_end(m, row0 + rows - 1); }
PA_DEVICE bool pa_mask_tile_partial(const PaMask& m, int row0, int n0, int cols) {
    return n0 + cols > m.seqlen_k || (m.causal && n0 + cols - 1 > row0 + m.offset);
}
PA_DEVICE int pa_mask_first_row(const PaMask& m, int n0) { return m.causal ? max(0, n0 - m.offset) : 0; }
