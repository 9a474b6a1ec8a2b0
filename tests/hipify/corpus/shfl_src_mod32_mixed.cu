// An indexed shuffle whose source lane is taken modulo 32 without a width, in code that numbers lanes with
// warpSize: on a 64-lane wave lanes 32-63 read from lanes 0-31.
// expect: refuse shfl-lane-mod32 8:64
extern "C" __global__ void neighbour_diff(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    const float v = i < n ? x[i] : 0.f;
    const float next = __shfl_sync(0xffffffff, v, (lane + 1) % 32);
    if (i < n) y[i] = next - v;
}
