// A whole-warp broadcast of a loaded value: lane 0 of the warp reads a row offset and shares it with the warp.
// No lane count is involved: it becomes a broadcast across the whole wave.
// expect: translate
extern "C" __global__ void gather_rows(const int* row_start, const float* values, float* out, int rows) {
    const int r = blockIdx.x;
    int start = 0;
    if (threadIdx.x == 0) start = row_start[r];
    start = __shfl_sync(0xffffffff, start, 0);
    out[r * blockDim.x + threadIdx.x] = values[start + threadIdx.x];
}
