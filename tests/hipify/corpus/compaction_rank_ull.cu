// Stream compaction inside a warp: each kept element's rank is the number of kept lanes below it, from a 64-bit
// ballot and a 64-bit lane mask (1ull << lane).
// expect: translate
extern "C" __global__ void compact_ranks(const int* flags, int* rank, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    const bool keep = i < n && flags[i] != 0;
    const unsigned long long kept = __ballot_sync(0xffffffff, keep);
    const unsigned long long lower = (1ull << lane) - 1ull;
    if (keep) rank[i] = __popcll(kept & lower);
}
