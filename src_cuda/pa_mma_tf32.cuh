// portattn matrix units, NVIDIA float32 as 3xTF32 on mma.sync m16n8k8 (32-lane warps; the C layout and ldmatrix
// come from pa_mma_sync.cuh). Included by pa_mma.cuh only.
#pragma once

#if defined(PA_VENDOR_CUDA)
// ---- NVIDIA float32: 3xTF32 on mma.sync m16n8k8 ------------------------------------------------------------------
// Each float x is split into a TF32 part big and the rest small = x - big (pa_tf32_split); a product is small*big +
// big*small + big*big (small*small, within 2^-20 of the product, is left out).
// Fragments (g = lane / 4, t = lane % 4):
//   A 16x8: (g, t), (g+8, t), (g, t+4), (g+8, t+4)    B 8x8 (k x n): (k t, n g), (k t+4, n g)
// For P·V the key order inside a k8 step is permuted: k = t holds key 2t and k = t + 4 key 2t + 1, so that the
// score C fragment is the A fragment as it stands; the V fragments are loaded with the same permutation.
#define PA_MMA_K 8
#define PA_MMA_TF32 1           // the split below; fragments can also be loaded from split tiles (*_parts)
#define PA_MMA_ACC_TRUNCATES 1  // sum P·V tiles outside the unit: its float accumulation truncates
struct pa_mma_a {
    unsigned big[4], small[4];
};
struct pa_mma_b {  // two n tiles: registers 0..1 for n 0..7, 2..3 for n 8..15
    unsigned big[4], small[4];
};

// The unit reads a float's upper 19 bits as TF32 (10 mantissa bits) and ignores the 13 low ones. x's big part keeps
// its upper 9 mantissa bits and sets the 10th, the middle of the 9-bit step that holds x (one integer instruction);
// the small part x - big (same exponent, exact in float32) then lies within half that step on either side (one
// more). Against big rounded to the nearest TF32, which took one more instruction per float, the small part can be
// twice as large, and the unit, which truncates it, leaves each product within about 2^-20 of its size instead of
// 2^-21, as often above as below. The kernels build with fast math: a small part below 2^-126 is flushed to 0 (an x
// below 2^-116 in size keeps only its big part), and an x of 0 has a big part of 2^-136.
// One lop3 with the second constant in a register (written out: the compiler made two instructions of the and and
// the or); in a kernel at the register limit that register can cost a spill (docs/benchmarks.md, resources).
// The split guards nothing: a NaN or infinite x gives a NaN big part and a NaN small part, which keep every product
// NaN, so infinite inputs give NaN where IEEE arithmetic gives ±inf or a finite value (KernelSpec.ieee_infinities).
// Guards for those inputs (a compare and a select each) cost the float32 backward a quarter of its time (H200).
PA_DEVICE void pa_tf32_split(float x, unsigned& big, unsigned& small) {
    asm("lop3.b32 %0, %1, 0xffffc000, %2, 0xea;" : "=r"(big) : "r"(__float_as_uint(x)), "r"(0x2000u));
    small = __float_as_uint(x - __uint_as_float(big));
}
template <class F>
PA_DEVICE void pa_mma_split4(F& f, const unsigned (&raw)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) pa_tf32_split(__uint_as_float(raw[i]), f.big[i], f.small[i]);
}
// Where key k sits along the k dimension of P·V: the key order above, within each group of PA_MMA_K keys.
PA_DEVICE int pa_mma_pv_key_slot(int k) {
    const int j = k % PA_MMA_K;
    return k - j + (j % 2) * (PA_MMA_K / 2) + j / 2;
}

// ldmatrix moves 16-bit pairs, i.e. whole floats: an 8x8 b16 matrix is 8 rows of 4 floats, lane l getting float
// l % 4 of row l / 4.
PA_DEVICE const float* pa_mma_lane_a(const float* tile, int ld) {
    const int lane = pa_lane_id();
    return tile + (lane % 16) * ld + (lane / 16) * 4;
}
PA_DEVICE void pa_mma_load_a(pa_mma_a& a, const float* tile, int ld) {
    unsigned raw[4];
    pa_ldmatrix_x4(raw, pa_mma_lane_a(tile, ld));
    pa_mma_split4(a, raw);
}
// The same fragments from a split tile: its TF32 parts at tile, their rests `rest` floats further (pa_tile_split4).
PA_DEVICE void pa_mma_load_a_parts(pa_mma_a& a, const float* tile, int rest, int ld) {
    const float* at = pa_mma_lane_a(tile, ld);
    pa_ldmatrix_x4(a.big, at);
    pa_ldmatrix_x4(a.small, at + rest);
}
// With the P·V key order (above): k = t holds column 2t of the tile, k = t + 4 column 2t + 1.
PA_DEVICE void pa_mma_load_a_kn(pa_mma_a& a, const float* tile, int ld) {
    const int g = pa_lane_id() / 4, t = pa_lane_id() % 4;
    const unsigned raw[4] = {__float_as_uint(tile[g * ld + 2 * t]), __float_as_uint(tile[(g + 8) * ld + 2 * t]),
                             __float_as_uint(tile[g * ld + 2 * t + 1]),
                             __float_as_uint(tile[(g + 8) * ld + 2 * t + 1])};
    pa_mma_split4(a, raw);
}
PA_DEVICE void pa_mma_load_b_nk(pa_mma_b& b, const float* tile, int ld) {
    const int lane = pa_lane_id();
    unsigned raw[4];
    pa_ldmatrix_x4(raw, tile + (lane % 8 + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 4);
    pa_mma_split4(b, raw);
}
// Element i of this lane's B fragment from a [k][n] tile.
PA_DEVICE int pa_mma_lane_b_kn(int i, int ld) {
    const int g = pa_lane_id() / 4, t = pa_lane_id() % 4;
    return (2 * t + i % 2) * ld + 8 * (i / 2) + g;
}
PA_DEVICE void pa_mma_load_b_kn(pa_mma_b& b, const float* tile, int ld) {
    unsigned raw[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) raw[i] = __float_as_uint(tile[pa_mma_lane_b_kn(i, ld)]);
    pa_mma_split4(b, raw);
}
PA_DEVICE void pa_mma_load_b_kn_parts(pa_mma_b& b, const float* tile, int rest, int ld) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float* at = tile + pa_mma_lane_b_kn(i, ld);
        b.big[i] = __float_as_uint(at[0]);
        b.small[i] = __float_as_uint(at[rest]);
    }
}

PA_DEVICE void pa_mma_tf32(pa_mma_c& c, const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
PA_DEVICE void pa_mma(pa_mma_c& c, const pa_mma_a& a, const pa_mma_b& b, int t) {
    pa_mma_tf32(c, a.small, b.big[2 * t], b.big[2 * t + 1]);
    pa_mma_tf32(c, a.big, b.small[2 * t], b.small[2 * t + 1]);
    pa_mma_tf32(c, a.big, b.big[2 * t], b.big[2 * t + 1]);
}

PA_DEVICE void pa_mma_a_from_c(pa_mma_a& a, const pa_mma_c* tiles, int k0) {
    const pa_mma_c& c = tiles[k0 / PA_MMA_N];
    const unsigned raw[4] = {__float_as_uint(c[0]), __float_as_uint(c[2]), __float_as_uint(c[1]),
                             __float_as_uint(c[3])};
    pa_mma_split4(a, raw);
}
#endif  // PA_VENDOR_CUDA
