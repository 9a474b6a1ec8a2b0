// The rank of a lane among the kept lanes uses a 32-bit lane mask (1u << lane); lanes are numbered with warpSize
// and reach 63, where the shift overflows.
// expect: refuse lanemask-32bit-shift 9:43
extern "C" __global__ void kept_rank(const int* flags, int* rank, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    const bool keep = i < n && flags[i] != 0;
    const unsigned long long kept = __ballot_sync(0xffffffff, keep);
    if (keep) rank[i] = __popcll(kept & ((1u << lane) - 1u));
}
