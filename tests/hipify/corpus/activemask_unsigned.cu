// The active mask stored in `unsigned int`: the leader election then ignores lanes 32-63.
// expect: refuse ballot-32bit-store 7:33
// expect: refuse ballot-32bit-op 8:24
extern "C" __global__ void leader_add(const float* x, int* size, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || x[i] <= 0.f) return;
    const unsigned int active = __activemask();
    const int leader = __ffs(active) - 1;
    if (threadIdx.x % warpSize == leader) atomicAdd(size, 1);
}
