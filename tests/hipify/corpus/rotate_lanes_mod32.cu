// Rotate values by one lane inside each 32-lane group: the source lane is (lane + 1) % 32 with lane = tid % 32, so
// it always lies in 0..31 and the shuffle gets width 32.
// expect: rewrite add-width-32 9:9
extern "C" __global__ void rotate(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32;
    const int src = (lane + 1) % 32;
    float v = i < n ? in[i] : 0.f;
    v = __shfl_sync(0xffffffff, v, src);
    if (i < n) out[i] = v;
}
