/* tinylm's integer-dot decoding kernels, as torch ops (tinylm/a8.py compiles this file on first use and loads it:
   torch.ops.tinylm.q4a8_mm and torch.ops.tinylm.i8a8_mm).

   The activations are quantized to 8 bits per block of 32 values (scale dx = max|x| / 127, codes
   qx = round(x / dx)), as llama.cpp quantizes them to its Q8 blocks; each block of 32 weights then meets its
   32 activation codes in one integer dot product, and a float multiply-add per block applies the scales:

     Q4_1 weights  w = d q + m, q in [0, 15]:   sum_b d_b dx_b (q_b . qx_b)  +  sum_b m_b dx_b (sum of qx_b)
     int8 weights  w = s q, q in [-127, 127]:   s (sum_b dx_b (q_b . qx_b))

   With AVX2 the dot products are vpmaddubsw (unsigned 8-bit times signed 8-bit, pairs summed in int16) and
   vpmaddwd. The int16 pair sums cannot saturate here: 2 * 15 * 127 = 3,810 for Q4_1, and 2 * 127 * 127 =
   32,258 < 32,767 for int8 weights in [-127, 127] (the sign of w moved onto x, |w| unsigned). Without AVX2
   the same sums are plain C loops. The integer sums are exact either way; only the order of the float sums
   over blocks differs. Rows are shared among torch's threads (at::parallel_for, torch.set_num_threads). */
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define QK 32

/* x (M, K) fp32 -> qx (M, K) int8, dx (M, K/32) scale per block, sx (M, K/32) = dx * sum of the block's codes.
   Returns how many values of x are NaN or infinite (their codes would be meaningless: the caller refuses them). */
static int64_t quantize_rows(const float *x, int64_t M, int64_t K, int8_t *qx, float *dx, float *sx) {
    const int64_t nb = K / QK;
    int64_t bad = 0;
    for (int64_t i = 0; i < M * K; i++) bad += !std::isfinite(x[i]);
    if (bad) return bad;
    for (int64_t r = 0; r < M; r++) {
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + r * K + b * QK;
            float amax = 0.0f;
            for (int j = 0; j < QK; j++) { float a = std::fabs(xb[j]); amax = a > amax ? a : amax; }
            const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            int8_t *q = qx + r * K + b * QK;
            int sum = 0;
            for (int j = 0; j < QK; j++) { int v = (int)std::nearbyint(xb[j] * id); q[j] = (int8_t)v; sum += v; }
            dx[r * nb + b] = d;
            sx[r * nb + b] = d * (float)sum;
        }
    }
    return 0;
}

#ifdef __AVX2__
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* one block's integer sum in plain C (where AVX2 is absent, and for an odd last block): Q4_1 codes, byte j
   holding weight j (low nibble) and weight j + 16 (high), against 32 activation codes */
static inline int block_q4(const uint8_t *c, const int8_t *qx) {
    int isum = 0;
    for (int j = 0; j < 16; j++) isum += (c[j] & 15) * qx[j] + (c[j] >> 4) * qx[j + 16];
    return isum;
}

/* the same for 32 int8 weights */
static inline int block_q8(const int8_t *w, const int8_t *qx) {
    int isum = 0;
    for (int j = 0; j < QK; j++) isum += w[j] * qx[j];
    return isum;
}

/* one row of Q4_1 blocks: codes (K/2 bytes: byte j of a block = weight j low nibble, weight j+16 high),
   d, m (K/32) against one quantized activation row */
static inline float dot_q4(const uint8_t *c, const float *d, const float *m, int64_t nb,
                           const int8_t *qx, const float *dx, const float *sx) {
#ifdef __AVX2__
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    /* the minimums' term, sum_b m_b sx_b, eight blocks at a time: as one scalar chain of multiply-adds it
       waited on itself (4 cycles each) for longer than the integer products took */
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) accm = _mm256_fmadd_ps(_mm256_loadu_ps(m + b), _mm256_loadu_ps(sx + b), accm);
    float tail = 0.0f;
    for (; b < nb; b++) tail += m[b] * sx[b];
    for (b = 0; b + 1 < nb; b += 2) {
        __m128i c0 = _mm_loadu_si128((const __m128i *)(c + b * 16));
        __m128i c1 = _mm_loadu_si128((const __m128i *)(c + b * 16 + 16));
        __m256i q0 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c0, 4), c0), low);
        __m256i q1 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c1, 4), c1), low);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(qx + b * QK));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(qx + b * QK + QK));
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, x0), ones);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, x1), ones);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d[b] * dx[b]), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d[b + 1] * dx[b + 1]), _mm256_cvtepi32_ps(p1), acc1);
    }
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), accm)) + tail;
    for (; b < nb; b++) {
        s += d[b] * dx[b] * (float)block_q4(c + b * 16, qx + b * QK);
    }
    return s;
#else
    float s = 0.0f, msum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        s += d[b] * dx[b] * (float)block_q4(c + b * 16, qx + b * QK);
        msum += m[b] * sx[b];
    }
    return s + msum;
#endif
}

/* one row of int8 weights (one scale per row, applied by the caller) against one quantized activation row */
static inline float dot_q8(const int8_t *w, int64_t nb, const int8_t *qx, const float *dx) {
#ifdef __AVX2__
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(w + b * QK));
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(w + b * QK + QK));
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(qx + b * QK));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(qx + b * QK + QK));
        /* |w| (unsigned) times x carrying w's sign */
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(x0, w0)), ones);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w1, w1), _mm256_sign_epi8(x1, w1)), ones);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(dx[b]), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(dx[b + 1]), _mm256_cvtepi32_ps(p1), acc1);
    }
    float s = hsum8(_mm256_add_ps(acc0, acc1));
    for (; b < nb; b++) {
        s += dx[b] * (float)block_q8(w + b * QK, qx + b * QK);
    }
    return s;
#else
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        s += dx[b] * (float)block_q8(w + b * QK, qx + b * QK);
    }
    return s;
#endif
}

/* rows of the output at a time for each thread: enough work to be worth a thread's start (a few microseconds) */
static const int64_t GRAIN = 64;

static void check_input(const at::Tensor &x, int64_t K, const char *op) {
    TORCH_CHECK(x.dim() == 2 && x.size(1) == K && x.scalar_type() == at::kFloat && x.is_contiguous(),
                op, ": x must be a contiguous (M, ", K, ") fp32 tensor, got ", x.sizes(), " ", x.scalar_type());
    TORCH_CHECK(K % QK == 0, op, ": in_features ", K, " is not a multiple of ", QK);
}

/* the activations' codes, block scales and block sums, in the calling thread's scratch memory: reused from
   call to call, since allocating three tensors cost more than quantizing a row */
struct Quantized { const int8_t *qx; const float *dx, *sx; };

static Quantized quantize(const at::Tensor &x, const char *op) {
    thread_local std::vector<int8_t> qx;
    thread_local std::vector<float> dx, sx;
    const int64_t M = x.size(0), K = x.size(1);
    qx.resize(M * K);
    dx.resize(M * K / QK);
    sx.resize(M * K / QK);
    int64_t bad = quantize_rows(x.data_ptr<float>(), M, K, qx.data(), dx.data(), sx.data());
    TORCH_CHECK_VALUE(bad == 0, op, ": ", bad, " activation value(s) are NaN or infinite: 8-bit codes cannot hold "
                      "them (the model's numbers overflowed before this layer); check the input and the weights");
    return {qx.data(), dx.data(), sx.data()};
}

/* x (M, K) fp32 times Q4_1 weights (N, K): nibbles (N, K/2) uint8, d and m (N, K/32) fp32 -> (M, N) fp32 */
at::Tensor q4a8_mm(const at::Tensor &x, const at::Tensor &nibbles, const at::Tensor &d, const at::Tensor &m) {
    const int64_t N = nibbles.size(0), K = nibbles.size(1) * 2, M = x.size(0), nb = K / QK;
    check_input(x, K, "q4a8_mm");
    TORCH_CHECK(nibbles.scalar_type() == at::kByte && nibbles.is_contiguous() && d.is_contiguous() &&
                m.is_contiguous() && d.scalar_type() == at::kFloat && m.scalar_type() == at::kFloat &&
                d.sizes() == m.sizes() && d.size(0) == N && d.size(1) == nb,
                "q4a8_mm: nibbles (N, K/2) uint8, d and m (N, K/32) fp32, all contiguous");
    Quantized q = quantize(x, "q4a8_mm");
    at::Tensor y = at::empty({M, N}, x.options());
    const uint8_t *c = nibbles.data_ptr<uint8_t>();
    const float *dp = d.data_ptr<float>(), *mp = m.data_ptr<float>(), *dx = q.dx, *sx = q.sx;
    const int8_t *qx = q.qx;
    float *yp = y.data_ptr<float>();
    at::parallel_for(0, N, GRAIN, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; n++)
            for (int64_t r = 0; r < M; r++)
                yp[r * N + n] = dot_q4(c + n * (K / 2), dp + n * nb, mp + n * nb, nb, qx + r * K, dx + r * nb,
                                       sx + r * nb);
    });
    return y;
}

/* x (M, K) fp32 times int8 weights (N, K) in [-127, 127] with one fp32 scale per row (N,) -> (M, N) fp32 */
at::Tensor i8a8_mm(const at::Tensor &x, const at::Tensor &weight, const at::Tensor &scale) {
    const int64_t N = weight.size(0), K = weight.size(1), M = x.size(0), nb = K / QK;
    check_input(x, K, "i8a8_mm");
    TORCH_CHECK(weight.scalar_type() == at::kChar && weight.is_contiguous() && scale.scalar_type() == at::kFloat &&
                scale.is_contiguous() && scale.dim() == 1 && scale.size(0) == N,
                "i8a8_mm: weight (N, K) int8 and scale (N,) fp32, contiguous");
    Quantized q = quantize(x, "i8a8_mm");
    at::Tensor y = at::empty({M, N}, x.options());
    const int8_t *w = weight.data_ptr<int8_t>(), *qx = q.qx;
    const float *s = scale.data_ptr<float>(), *dx = q.dx;
    float *yp = y.data_ptr<float>();
    at::parallel_for(0, N, GRAIN, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; n++)
            for (int64_t r = 0; r < M; r++)
                yp[r * N + n] = s[n] * dot_q8(w + n * K, nb, qx + r * K, dx + r * nb);
    });
    return y;
}

/* the activations' codes, scales and sums as the kernels make them (tests hold them to a8.quantize_blocks) */
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_blocks(const at::Tensor &x) {
    check_input(x, x.size(1), "quantize_blocks");
    Quantized q = quantize(x, "quantize_blocks");
    const int64_t M = x.size(0), K = x.size(1);
    at::Tensor qx = at::empty({M, K}, x.options().dtype(at::kChar)), dx = at::empty({M, K / QK}, x.options()),
               sx = at::empty({M, K / QK}, x.options());
    std::copy(q.qx, q.qx + M * K, qx.data_ptr<int8_t>());
    std::copy(q.dx, q.dx + M * K / QK, dx.data_ptr<float>());
    std::copy(q.sx, q.sx + M * K / QK, sx.data_ptr<float>());
    return {qx, dx, sx};
}

TORCH_LIBRARY(tinylm, lib) {
    lib.def("q4a8_mm(Tensor x, Tensor nibbles, Tensor d, Tensor m) -> Tensor");
    lib.def("i8a8_mm(Tensor x, Tensor weight, Tensor scale) -> Tensor");
    lib.def("quantize_blocks(Tensor x) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(tinylm, CPU, lib) {
    lib.impl("q4a8_mm", &q4a8_mm);
    lib.impl("i8a8_mm", &i8a8_mm);
    lib.impl("quantize_blocks", &quantize_blocks);
}
