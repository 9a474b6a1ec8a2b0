// Float atomic maximum built from atomicCAS on the bit pattern, and a double atomicAdd.
// expect: translate
__device__ float atomic_max_float(float* addr, float value) {
    int* p = reinterpret_cast<int*>(addr);
    int old = *p;
    while (__int_as_float(old) < value) {
        const int assumed = old;
        old = atomicCAS(p, assumed, __float_as_int(value));
        if (old == assumed) break;
    }
    return __int_as_float(old);
}

extern "C" __global__ void max_and_sum(const float* x, float* mx, double* sum, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomic_max_float(mx, x[i]);
        atomicAdd(sum, (double)x[i]);
    }
}
