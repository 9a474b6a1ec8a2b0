// The classic block reduction: warps reduce with shuffles, lane 0 of each warp writes its sum to shared memory,
// and the first warp reduces the partial sums. Lanes and warps are numbered with warpSize; the 32 in
// `shared[32]` is an array size (the most warps a block can have), not a lane count.
// expect: translate
__inline__ __device__ float warp_reduce_sum(float val) {
    for (int offset = warpSize / 2; offset > 0; offset /= 2) val += __shfl_down_sync(0xffffffff, val, offset);
    return val;
}

__inline__ __device__ float block_reduce_sum(float val) {
    static __shared__ float shared[32];
    const int lane = threadIdx.x % warpSize;
    const int wid = threadIdx.x / warpSize;
    val = warp_reduce_sum(val);
    if (lane == 0) shared[wid] = val;
    __syncthreads();
    val = (threadIdx.x < blockDim.x / warpSize) ? shared[lane] : 0.f;
    if (wid == 0) val = warp_reduce_sum(val);
    return val;
}

extern "C" __global__ void block_sums(const float* in, float* out, int n) {
    float sum = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) sum += in[i];
    sum = block_reduce_sum(sum);
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}
