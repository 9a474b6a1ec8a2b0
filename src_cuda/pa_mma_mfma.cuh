// portattn matrix units, AMD MFMA on 64-lane waves (gfx90a and later, and NVIDIA under the wave64 emulation):
// 16x16x16 f16 / bf16_1k, or 16x16x4 f32, through the building blocks of pa_mfma.cuh. Included by pa_mma.cuh only.
#pragma once

// ---- 64-lane waves: MFMA 16x16x16 (f16, or bf16_1k) or 16x16x4f32 ------------------------------------------------
// C layout of both (pa_mfma.cuh, l = lane): column l % 16, rows 4 (l / 16) + i, i = 0..3.
#include "pa_mfma.cuh"
#define PA_MMA_M 16
#define PA_MMA_N 16
#define PA_MMA_B_TILES 1
#define PA_MMA_C_ROWS 4
#define PA_MMA_C_COLS 1
#define PA_MMA_ROW_LANES 16
#define PA_MMA_ACC_TRUNCATES 0  // accumulate P·V in the unit across tiles
typedef pa_mfma_f32x4 pa_mma_c;
PA_DEVICE int pa_mma_c_row(int rr) { return 4 * (pa_lane_id() / 16) + rr; }
PA_DEVICE int pa_mma_c_col(int /*cc*/) { return pa_lane_id() % 16; }

#if PA_F32
// float32: A: row l % 16, k = l / 16; B: column l % 16, k = l / 16 (one element each).
#define PA_MMA_K 4
typedef float pa_mma_a;
typedef float pa_mma_b;

PA_DEVICE void pa_mma_load_a(pa_mma_a& a, const float* tile, int ld) {
    a = tile[(pa_lane_id() % 16) * ld + pa_lane_id() / 16];
}
PA_DEVICE void pa_mma_load_a_kn(pa_mma_a& a, const float* tile, int ld) { pa_mma_load_a(a, tile, ld); }
PA_DEVICE void pa_mma_load_b_nk(pa_mma_b& b, const float* tile, int ld) { pa_mma_load_a(b, tile, ld); }
PA_DEVICE void pa_mma_load_b_kn(pa_mma_b& b, const float* tile, int ld) {
    b = tile[(pa_lane_id() / 16) * ld + pa_lane_id() % 16];
}
PA_DEVICE void pa_mma(pa_mma_c& c, const pa_mma_a& a, const pa_mma_b& b, int /*t*/) {
    c = pa_mfma_f32_16x16x4f32(a, b, c);
}

// A lane (row r = l % 16, key k0 + l / 16) needs P[r][key], held by C lane 16 (r / 4) + key % 16 as element
// r % 4: every element is offered once and each lane keeps the one of its row.
PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c& c = tiles[k0 / PA_MMA_N];
    const int lane = pa_lane_id();
    const int r = lane % 16;
    const int src = 16 * (r / 4) + k0 % PA_MMA_N + lane / 16;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float v = pa_shfl(c[e], src, PA_WARP_SIZE);
        if (e == r % 4) a = v;
    }
}
#else
// 16-bit: A: row l % 16, k = 4 (l / 16) + j; B: column l % 16, k = 4 (l / 16) + j.
#define PA_MMA_K 16
#if PA_BF16
typedef pa_mfma_bf16x4 pa_mma_a;
#else
typedef pa_mfma_f16x4 pa_mma_a;
#endif
typedef pa_mma_a pa_mma_b;

// Four 16-bit elements from their raw bits (two packed words).
PA_DEVICE void pa_mma_frag_from_bits(pa_mma_a& f, unsigned lo, unsigned hi) {
#if defined(PA_VENDOR_CUDA)
    f[0] = lo & 0xffffu;  // the emulation's fragments hold raw bits already
    f[1] = lo >> 16;
    f[2] = hi & 0xffffu;
    f[3] = hi >> 16;
#else
    const unsigned bits[2] = {lo, hi};
    __builtin_memcpy(&f, bits, 8);
#endif
}

PA_DEVICE void pa_mma_load_a(pa_mma_a& a, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    const unsigned* p = reinterpret_cast<const unsigned*>(tile + (lane % 16) * ld + 4 * (lane / 16));
    pa_mma_frag_from_bits(a, p[0], p[1]);
}
PA_DEVICE void pa_mma_load_a_kn(pa_mma_a& a, const pa_u16* tile, int ld) { pa_mma_load_a(a, tile, ld); }
PA_DEVICE void pa_mma_load_b_nk(pa_mma_b& b, const pa_u16* tile, int ld) { pa_mma_load_a(b, tile, ld); }
PA_DEVICE void pa_mma_load_b_kn(pa_mma_b& b, const pa_u16* tile, int ld) {
    const int lane = pa_lane_id();
    const pa_u16* p = tile + 4 * (lane / 16) * ld + lane % 16;
    pa_mma_frag_from_bits(b, p[0] | ((unsigned)p[ld] << 16), p[2 * ld] | ((unsigned)p[3 * ld] << 16));
}

PA_DEVICE void pa_mma(pa_mma_c& c, const pa_mma_a& a, const pa_mma_b& b, int /*t*/) {
#if PA_BF16
    c = pa_mfma_f32_16x16x16bf16_1k(a, b, c);
#else
    c = pa_mfma_f32_16x16x16f16(a, b, c);
#endif
}

// A lane (row r = l % 16, k = 4 (l / 16) + j) needs P[r][k], held by C lane 16 (r / 4) + k as element r % 4. In
// round m every lane offers its element (k % 4 - m) mod 4 and each lane takes the k with (k - r) % 4 == m, so four
// shuffles move the whole tile.
PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c* c = tiles + k0 / PA_MMA_N;
    const int lane = pa_lane_id();
    const int r = lane % 16, kb = 4 * (lane / 16), e = r % 4;
    float got[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        const int give = (e - m) & 3;
        const float offer = give == 0 ? c[0][0] : give == 1 ? c[0][1] : give == 2 ? c[0][2] : c[0][3];
        const int j = (e + m) & 3;
        const float v = pa_shfl(offer, 16 * (r / 4) + kb + j, PA_WARP_SIZE);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
            if (jj == j) got[jj] = v;
    }
    pa_mma_frag_from_bits(a, pa_pack_x2(got[0], got[1]), pa_pack_x2(got[2], got[3]));
}
#endif  // PA_F32
