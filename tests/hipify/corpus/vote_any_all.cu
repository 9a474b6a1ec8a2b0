// Whole-warp votes: the warp skips work when all its values are zero and flags the block when any is negative.
// A vote over the whole warp becomes a vote over the whole wave, with the same meaning.
// expect: translate
extern "C" __global__ void scan_signs(const float* x, int* has_negative, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = i < n ? x[i] : 0.f;
    if (__all_sync(__activemask(), v == 0.f)) return;
    if (__any_sync(0xffffffff, v < 0.f)) atomicOr(has_negative, 1);
    if (i < n) y[i] = v * v;
}
