// portattn matrix units, NVIDIA mma.sync (32-lane warps): the m16n8 C fragment layout and ldmatrix, and the 16-bit
// m16n8k16 fragments (float32 builds take theirs from pa_mma_tf32.cuh). Included by pa_mma.cuh only.
#pragma once

#if defined(PA_VENDOR_CUDA)
// ---- NVIDIA mma.sync: m16n8 tiles, two adjacent n tiles per B fragment ------------------------------------------
// C 16x8 float, 4 registers (g = lane / 4, t = lane % 4): (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
#define PA_MMA_M 16
#define PA_MMA_N 8
#define PA_MMA_B_TILES 2
#define PA_MMA_C_ROWS 2
#define PA_MMA_C_COLS 2
#define PA_MMA_ROW_LANES 4
typedef float pa_mma_c[4];
PA_DEVICE int pa_mma_c_row(int rr) { return pa_lane_id() / 4 + 8 * rr; }
PA_DEVICE int pa_mma_c_col(int cc) { return 2 * (pa_lane_id() % 4) + cc; }

// Four 8x8 matrices of 16-bit elements; lane i gives the address of row i % 8 of matrix i / 8. Register j gets
// matrix j with lane l holding row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (.trans: column instead of row).
PA_DEVICE void pa_ldmatrix_x4(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(pa_smem_addr(smem)));
}
PA_DEVICE void pa_ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(pa_smem_addr(smem)));
}

#if !PA_F32
// ---- NVIDIA 16-bit: mma.sync m16n8k16, fragments loaded with ldmatrix --------------------------------------------
// Fragments (g = lane / 4, t = lane % 4):
//   A 16x16 row-major, 4 x2 registers: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
//   B 16x8 (k x n), 2 x2 registers:    (k 2t..2t+1, n g), (k 2t+8..2t+9, n g)
#define PA_MMA_K 16
#define PA_MMA_ACC_TRUNCATES 0  // accumulate P·V in the unit across tiles
typedef unsigned pa_mma_a[4];
typedef unsigned pa_mma_b[4];

// The element (row, column) of a 16x16 tile whose address this lane hands to ldmatrix in the loads below, for the A
// fragment and for the B fragments read along n (nk) or along k (kn); the *_at loads take that address, so that
// tiles in layouts other than rows of a stride (pa_tile.cuh's swizzled tiles) can be read. The strided loads below
// keep their own inline form of the same addresses: written through these, ptxas gives the backward's dK/dV kernel
// two more registers.
#define PA_MMA_LANE_ADDRESSES 1
struct PaLaneElem {
    int r, c;
};
PA_DEVICE PaLaneElem pa_mma_lane_a() {
    const int lane = pa_lane_id();
    return {lane % 16, (lane / 16) * 8};
}
PA_DEVICE PaLaneElem pa_mma_lane_b_nk() {
    const int lane = pa_lane_id();
    return {lane % 8 + (lane / 16) * 8, ((lane / 8) % 2) * 8};
}
PA_DEVICE PaLaneElem pa_mma_lane_b_kn() { return pa_mma_lane_a(); }
PA_DEVICE void pa_mma_load_a_at(pa_mma_a& a, const pa_u16* lane_elem) { pa_ldmatrix_x4(a, lane_elem); }
// b[0..1]: n 0..7, b[2..3]: n 8..15.
PA_DEVICE void pa_mma_load_b_nk_at(pa_mma_b& b, const pa_u16* lane_elem) { pa_ldmatrix_x4(b, lane_elem); }
PA_DEVICE void pa_mma_load_b_kn_at(pa_mma_b& b, const pa_u16* lane_elem) { pa_ldmatrix_x4_trans(b, lane_elem); }

PA_DEVICE void pa_mma_load_a(pa_mma_a& a, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    pa_ldmatrix_x4(a, tile + (lane % 16) * ld + (lane / 16) * 8);
}
PA_DEVICE void pa_mma_load_a_kn(pa_mma_a& a, const pa_u16* tile, int ld) { pa_mma_load_a(a, tile, ld); }
PA_DEVICE void pa_mma_load_b_nk(pa_mma_b& b, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    pa_ldmatrix_x4(b, tile + (lane % 8 + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 8);
}
PA_DEVICE void pa_mma_load_b_kn(pa_mma_b& b, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    pa_ldmatrix_x4_trans(b, tile + (lane % 16) * ld + (lane / 16) * 8);
}

PA_DEVICE void pa_mma(pa_mma_c& c, const pa_mma_a& a, const pa_mma_b& b, int t) {
#if PA_BF16
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[2 * t]), "r"(b[2 * t + 1]));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[2 * t]), "r"(b[2 * t + 1]));
#endif
}

PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c* c = tiles + k0 / PA_MMA_N;  // two n8 tiles make one k16 step
    a[0] = pa_pack_x2(c[0][0], c[0][1]);
    a[1] = pa_pack_x2(c[0][2], c[0][3]);
    a[2] = pa_pack_x2(c[1][0], c[1][1]);
    a[3] = pa_pack_x2(c[1][2], c[1][3]);
}
#endif  // !PA_F32
#endif  // PA_VENDOR_CUDA
