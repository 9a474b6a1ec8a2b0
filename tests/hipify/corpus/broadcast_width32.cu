// Literal 32 with widths everywhere: a shuffle-down tree and a broadcast from lane 0, both with width 32, in code
// that numbers its 32-lane groups with `& 31` and `>> 5`. Every shuffle says its segment, so nothing changes.
// expect: translate
extern "C" __global__ void normalize_groups(float* x, int n) {
    const int lane = threadIdx.x & 31;
    const int group = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int i = group * 32 + lane;
    float v = i < n ? x[i] : 0.f;
    float s = v * v;
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_down_sync(0xffffffffu, s, offset, 32);
    s = __shfl_sync(0xffffffffu, s, 0, 32);
    if (i < n) x[i] = v * rsqrtf(s + 1e-6f);
}
