// Decoding, first step when new keys come with the call: k_new / v_new rows are written into the cache (contiguous,
// or through the page table) after each sequence's cache_seqlens[b] rows, in place. Nothing of a sequence whose
// rows do not fit its cache (or whose cache_batch_idx or cache_leftpad is out of range) is written, nor a row on a
// page outside the pool: the decode kernel then returns NaN for that sequence.
// One thread copies 16 bytes; a block covers ROWS = PA_THREADS / (PA_HEAD_DIM / 16 bytes) rows of [B, Nnew, Hk].
//
// Defined by the host: PA_WARP_SIZE, PA_HEAD_DIM, PA_THREADS, PA_BF16, PA_F32.
#include "pa_decode_params.cuh"
#include "pa_prelude_elem.cuh"

#if !defined(PA_HEAD_DIM) || !defined(PA_THREADS)
#error "PA_HEAD_DIM and PA_THREADS must be defined by the host"
#endif

namespace {
constexpr int CHUNK = 16 / (int)sizeof(pa_elem);  // elements per 16-byte copy
constexpr int PER_ROW = PA_HEAD_DIM / CHUNK;      // threads per row
constexpr int ROWS = PA_THREADS / PER_ROW;        // rows per block
static_assert(PA_HEAD_DIM % CHUNK == 0 && ROWS >= 1, "bad head dim for the append kernel");
}  // namespace

extern "C" __global__ void __launch_bounds__(PA_THREADS) pa_flash_decode_append(const PaDecodeParams p) {
    pa_wait_prior_grid();  // the previous kernel on the stream may still read the cache or write k_new
    pa_release_next_grid();
    const pa_i64 row = (pa_i64)blockIdx.x * ROWS + threadIdx.x / PER_ROW;
    const int c = threadIdx.x % PER_ROW * CHUNK;
    if ((int)threadIdx.x >= ROWS * PER_ROW || row >= (pa_i64)p.batch * p.seqlen_new * p.heads_kv) return;
    const int h_kv = (int)(row % p.heads_kv), t = (int)(row / p.heads_kv % p.seqlen_new);
    const int b = (int)(row / p.heads_kv / p.seqlen_new);
    const PaDecodeSeq seq = pa_decode_seq(p, b);
    if (seq.keys < 0) return;
    const int key = p.cache_seqlens[b] + t, cb = seq.cache_b, size = (int)sizeof(pa_elem);
    bool bad = false;
    const PaCacheAt at = pa_decode_locate(p, cb, key, bad);
    pa_elem* k = (pa_elem*)pa_decode_cache_row(p.k, p.k_sb, p.k_sn, p.k_sh, size, at, h_kv);
    pa_elem* v = (pa_elem*)pa_decode_cache_row(p.v, p.v_sb, p.v_sn, p.v_sh, size, at, h_kv);
    if (bad) return;
    const pa_elem* kn = static_cast<const pa_elem*>(p.k_new) + b * p.kn_sb + (pa_i64)t * p.kn_sn + h_kv * p.kn_sh;
    const pa_elem* vn = static_cast<const pa_elem*>(p.v_new) + b * p.vn_sb + (pa_i64)t * p.vn_sn + h_kv * p.vn_sh;
    *reinterpret_cast<uint4*>(k + c) = *reinterpret_cast<const uint4*>(kn + c);
    *reinterpret_cast<uint4*>(v + c) = *reinterpret_cast<const uint4*>(vn + c);
}
