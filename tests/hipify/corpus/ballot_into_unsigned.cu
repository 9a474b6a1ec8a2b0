// A ballot stored in `unsigned`: on a 64-lane wave the ballot has 64 bits, and the votes of lanes 32-63 are lost.
// expect: refuse ballot-32bit-store 7:18
extern "C" __global__ void vote_bits(const int* x, unsigned* bits, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % warpSize;
    const bool p = i < n && x[i] != 0;
    unsigned b = __ballot_sync(0xffffffffu, p);
    if (lane == 0) bits[i / warpSize] = b;
}
