// Block-wide inclusive scan (Hillis-Steele) in dynamic shared memory (`extern __shared__`), double-buffered;
// the block size is whatever the launch gives.
// expect: translate
extern "C" __global__ void block_scan(const float* in, float* out, int n) {
    extern __shared__ float buf[];
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    int pout = 0, pin = 1;
    buf[pout * blockDim.x + t] = i < n ? in[i] : 0.f;
    __syncthreads();
    for (int offset = 1; offset < blockDim.x; offset *= 2) {
        pout = 1 - pout;
        pin = 1 - pout;
        float v = buf[pin * blockDim.x + t];
        if (t >= offset) v += buf[pin * blockDim.x + t - offset];
        buf[pout * blockDim.x + t] = v;
        __syncthreads();
    }
    if (i < n) out[i] = buf[pout * blockDim.x + t];
}
