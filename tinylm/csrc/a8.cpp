/* tinylm's integer-dot decoding kernels, as torch ops (tinylm/a8.py compiles this file on first use and loads it:
   torch.ops.tinylm.q4a8_mm and torch.ops.tinylm.i8a8_mm).

   The activations are quantized to 8 bits per block of 32 values (scale dx = max|x| / 127, codes
   qx = round(x / dx)), as llama.cpp quantizes them to its Q8 blocks; each block of 32 weights then meets its
   32 activation codes in one integer dot product, and a float multiply-add per block applies the scales:

     Q4_1 weights  w = d q + m, q in [0, 15]:   sum_b d_b dx_b (q_b . qx_b)  +  sum_b m_b dx_b (sum of qx_b)

   Each Q4_1 block keeps d and its zero z = m + 8 d in bf16, as tinylm's q4 format does (16 bits each, as the
   GGUF file's fp16 d and m): m = z - 8 d is computed in fp32 as the kernel needs it, the same fp32 number
   q4 would compute (8 d is exact, so one rounding).
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
#include <cstring>
#include <initializer_list>
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
static inline __m256 bf16x8(const uint16_t *p) {       // eight bf16 numbers as fp32
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

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

static inline float bf16(uint16_t h) {                 // a bf16 number's fp32 value: its bits, shifted up
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float block_min(const uint16_t *d, const uint16_t *z, int64_t b) {   // m = z - 8 d
    return bf16(z[b]) - 8.0f * bf16(d[b]);
}

/* one row of Q4_1 blocks: codes (K/2 bytes: byte j of a block = weight j low nibble, weight j+16 high),
   d and z (K/32, bf16 bits) against one quantized activation row */
static inline float dot_q4(const uint8_t *c, const uint16_t *d, const uint16_t *z, int64_t nb,
                           const int8_t *qx, const float *dx, const float *sx) {
#ifdef __AVX2__
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    /* the minimums' term, sum_b m_b sx_b, eight blocks at a time: as one scalar chain of multiply-adds it
       waited on itself (4 cycles each) for longer than the integer products took */
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    int64_t b = 0;
    const __m256 eight = _mm256_set1_ps(8.0f);
    for (; b + 8 <= nb; b += 8) {
        const __m256 db = bf16x8(d + b), mb = _mm256_sub_ps(bf16x8(z + b), _mm256_mul_ps(eight, db));
        accm = _mm256_fmadd_ps(mb, _mm256_loadu_ps(sx + b), accm);
    }
    float tail = 0.0f;
    for (; b < nb; b++) tail += block_min(d, z, b) * sx[b];
    for (b = 0; b + 1 < nb; b += 2) {
        __m128i c0 = _mm_loadu_si128((const __m128i *)(c + b * 16));
        __m128i c1 = _mm_loadu_si128((const __m128i *)(c + b * 16 + 16));
        __m256i q0 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c0, 4), c0), low);
        __m256i q1 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c1, 4), c1), low);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(qx + b * QK));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(qx + b * QK + QK));
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, x0), ones);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, x1), ones);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(bf16(d[b]) * dx[b]), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(bf16(d[b + 1]) * dx[b + 1]), _mm256_cvtepi32_ps(p1), acc1);
    }
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), accm)) + tail;
    for (; b < nb; b++) {
        s += bf16(d[b]) * dx[b] * (float)block_q4(c + b * 16, qx + b * QK);
    }
    return s;
#else
    float s = 0.0f, msum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        s += bf16(d[b]) * dx[b] * (float)block_q4(c + b * 16, qx + b * QK);
        msum += block_min(d, z, b) * sx[b];
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

static Quantized quantize(const float *x, int64_t M, int64_t K, const char *op) {
    thread_local std::vector<int8_t> qx;
    thread_local std::vector<float> dx, sx;
    qx.resize(M * K);
    dx.resize(M * K / QK);
    sx.resize(M * K / QK);
    int64_t bad = quantize_rows(x, M, K, qx.data(), dx.data(), sx.data());
    TORCH_CHECK_VALUE(bad == 0, op, ": ", bad, " activation value(s) are NaN or infinite: 8-bit codes cannot hold "
                      "them (the model's numbers overflowed before this layer); check the input and the weights");
    return {qx.data(), dx.data(), sx.data()};
}

static Quantized quantize(const at::Tensor &x, const char *op) {
    return quantize(x.data_ptr<float>(), x.size(0), x.size(1), op);
}

/* one Q4_1 weight matrix (N, K) and where its (M, N) product goes */
struct Q4Weight { const uint8_t *c; const uint16_t *d, *z; int64_t N; float *y; };

/* the products of one quantized activation (M, K) with one or more weight matrices (q, k and v share x):
   their rows are shared among the threads as one range, so three small matrices cost one thread start */
static void q4_products(const Quantized &q, int64_t M, int64_t K, std::initializer_list<Q4Weight> weights) {
    const int64_t nb = K / QK;
    std::vector<Q4Weight> ws(weights);
    int64_t total = 0;
    for (const Q4Weight &w : ws) total += w.N;
    at::parallel_for(0, total, GRAIN, [&](int64_t begin, int64_t end) {
        int64_t first = 0;
        for (const Q4Weight &w : ws) {
            for (int64_t n = std::max(begin, first); n < std::min(end, first + w.N); n++) {
                const int64_t i = n - first;
                for (int64_t r = 0; r < M; r++)
                    w.y[r * w.N + i] = dot_q4(w.c + i * (K / 2), w.d + i * nb, w.z + i * nb, nb, q.qx + r * K,
                                              q.dx + r * nb, q.sx + r * nb);
            }
            first += w.N;
        }
    });
}

/* the bf16 bits of a (N, K/32) block-scale tensor */
static const uint16_t *bf16_bits(const at::Tensor &t) {
    return reinterpret_cast<const uint16_t *>(t.data_ptr<at::BFloat16>());
}

/* x (M, K) fp32 times Q4_1 weights (N, K): nibbles (N, K/2) uint8, d and z = m + 8 d (N, K/32) bf16
   -> (M, N) fp32 */
at::Tensor q4a8_mm(const at::Tensor &x, const at::Tensor &nibbles, const at::Tensor &d, const at::Tensor &z) {
    const int64_t N = nibbles.size(0), K = nibbles.size(1) * 2, M = x.size(0), nb = K / QK;
    check_input(x, K, "q4a8_mm");
    TORCH_CHECK(nibbles.scalar_type() == at::kByte && nibbles.is_contiguous() && d.is_contiguous() &&
                z.is_contiguous() && d.scalar_type() == at::kBFloat16 && z.scalar_type() == at::kBFloat16 &&
                d.sizes() == z.sizes() && d.dim() == 2 && d.size(0) == N && d.size(1) == nb,
                "q4a8_mm: nibbles (N, K/2) uint8, d and z (N, K/32) bf16, all contiguous");
    Quantized q = quantize(x, "q4a8_mm");
    at::Tensor y = at::empty({M, N}, x.options());
    q4_products(q, M, K, {{nibbles.data_ptr<uint8_t>(), bf16_bits(d), bf16_bits(z), N, y.data_ptr<float>()}});
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

/* ----------------------------------------------------------------------------------------------------------
   A whole one-token decoding step through every layer, in one call (torch.ops.tinylm.q4a8_layers): the loop
   that tinylm.model.Block runs, for a Llama-shaped model whose linears are all Q4_1 (SmolLM2). Per layer:

     h = rmsnorm(x) w1;  q, k, v = h Wq, h Wk, h Wv (one quantization of h);  RoPE on q and k;
     k, v -> the cache at `pos`;  each query head attends over the positions 0 .. pos of its KV head;
     x += attn Wo;  h = rmsnorm(x) w2;  x += (silu(h Wg) * h Wu) Wd

   The arithmetic is the Python model's (the same kernels for the products); only the order of the float
   sums in the norms and the attention differs. What it removes is the cost of calling: dozens of ops per
   layer, each dispatched from Python or from Inductor's wrapper, and attention over the whole cache
   behind a mask. */

/* sum of a[i] b[i], eight partial sums (so the compiler can use one vector register without -ffast-math) */
static inline float dot_f32(const float *a, const float *b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y = x / rms(x) * w for M rows of C: tinylm.model.RMSNorm */
static void rmsnorm(const float *x, const float *w, int64_t M, int64_t C, float eps, float *y) {
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * C;
        const float inv = 1.0f / std::sqrt(dot_f32(xr, xr, C) / (float)C + eps);
        for (int64_t i = 0; i < C; i++) y[r * C + i] = w[i] * (xr[i] * inv);
    }
}

/* RoPE, rotate-half layout (tinylm.model.apply_rope): pair (x_i, x_{i+D/2}) turned by the position's angle */
static void rope(float *x, int64_t heads, int64_t D, const float *cos, const float *sin) {
    const int64_t h2 = D / 2;
    for (int64_t h = 0; h < heads; h++) {
        float *v = x + h * D;
        for (int64_t i = 0; i < h2; i++) {
            const float a = v[i], b = v[i + h2];
            v[i] = a * cos[i] - b * sin[i];
            v[i + h2] = b * cos[i + h2] + a * sin[i + h2];
        }
    }
}

at::Tensor q4a8_layers(const at::Tensor &x_in, at::TensorList weights, at::Tensor &k_cache, at::Tensor &v_cache,
                       int64_t pos, const at::Tensor &cos, const at::Tensor &sin, int64_t n_heads, double eps) {
    const char *op = "q4a8_layers";
    TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, op, ": x must be (B, C) fp32");
    TORCH_CHECK(k_cache.dim() == 5 && k_cache.sizes() == v_cache.sizes() && k_cache.is_contiguous() &&
                v_cache.is_contiguous() && k_cache.scalar_type() == at::kFloat &&
                v_cache.scalar_type() == at::kFloat,
                op, ": k_cache and v_cache must be contiguous fp32 (layers, B, Hkv, max_len, D), got ",
                k_cache.sizes(), " and ", v_cache.sizes());
    const int64_t L = k_cache.size(0), B = x_in.size(0), C = x_in.size(1), Hkv = k_cache.size(2),
                  S = k_cache.size(3), D = k_cache.size(4), H = n_heads;
    TORCH_CHECK(L >= 1 && (int64_t)weights.size() == 23 * L, op, ": expected 23 weight tensors per layer for ", L,
                " layers, got ", weights.size());
    TORCH_CHECK(k_cache.size(1) == B && H % Hkv == 0 && D % 2 == 0, op, ": cache batch ", k_cache.size(1),
                " for x's ", B, " rows; ", H, " query heads over ", Hkv, " KV heads of size ", D);
    TORCH_CHECK(pos >= 0 && pos < S, op, ": position ", pos, " is outside the cache's ", S, " slots");
    TORCH_CHECK(cos.numel() == D && sin.numel() == D && cos.is_contiguous() && sin.is_contiguous() &&
                cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat,
                op, ": cos and sin must be this position's contiguous fp32 rows (", D, ",)");
    const int64_t F = weights[14].size(0);                   // gate_proj's rows: the feed-forward width
    auto q4 = [&](int64_t i, int64_t N, int64_t K, float *y) {
        const at::Tensor &c = weights[i], &d = weights[i + 1], &z = weights[i + 2];
        TORCH_CHECK(c.scalar_type() == at::kByte && c.is_contiguous() && c.size(0) == N && c.size(1) * 2 == K &&
                    d.scalar_type() == at::kBFloat16 && z.scalar_type() == at::kBFloat16 && d.is_contiguous() &&
                    z.is_contiguous() && d.numel() == N * (K / QK) && z.numel() == N * (K / QK),
                    op, ": weight ", i, " must be Q4_1 nibbles (", N, ", ", K / 2, ") uint8 with d and z (", N,
                    ", ", K / QK, ") bf16, contiguous");
        return Q4Weight{c.data_ptr<uint8_t>(), bf16_bits(d), bf16_bits(z), N, y};
    };
    auto vec = [&](int64_t i, int64_t n) {
        TORCH_CHECK(weights[i].scalar_type() == at::kFloat && weights[i].is_contiguous() &&
                    weights[i].numel() == n, op, ": weight ", i, " must be a norm's (", n, ",) fp32 weight");
        return weights[i].data_ptr<float>();
    };
    for (int64_t l = 0; l < L; l++) {                    // every weight checked before any layer writes the cache
        const int64_t w = 23 * l;
        vec(w, C), vec(w + 13, C);
        q4(w + 1, H * D, C, nullptr), q4(w + 4, Hkv * D, C, nullptr), q4(w + 7, Hkv * D, C, nullptr);
        q4(w + 10, C, H * D, nullptr), q4(w + 14, F, C, nullptr), q4(w + 17, F, C, nullptr);
        q4(w + 20, C, F, nullptr);
    }
    at::Tensor x_out = x_in.contiguous().clone();
    float *x = x_out.data_ptr<float>();
    std::vector<float> h(B * C), q(B * H * D), k(B * Hkv * D), v(B * Hkv * D), att(B * H * D), y(B * C),
        g(B * F), u(B * F), scores(B * H * (pos + 1));
    const float scale = 1.0f / std::sqrt((float)D), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
    float *kc = k_cache.data_ptr<float>(), *vc = v_cache.data_ptr<float>();
    for (int64_t l = 0; l < L; l++) {
        const int64_t w = 23 * l;
        rmsnorm(x, vec(w, C), B, C, (float)eps, h.data());
        Quantized qh = quantize(h.data(), B, C, op);
        q4_products(qh, B, C, {q4(w + 1, H * D, C, q.data()), q4(w + 4, Hkv * D, C, k.data()),
                               q4(w + 7, Hkv * D, C, v.data())});
        for (int64_t b = 0; b < B; b++) {
            rope(q.data() + b * H * D, H, D, cp, sp);
            rope(k.data() + b * Hkv * D, Hkv, D, cp, sp);
            for (int64_t j = 0; j < Hkv; j++) {            // this position's slot of layer l's cache
                const int64_t at_ = (((l * B + b) * Hkv + j) * S + pos) * D;
                std::copy(k.data() + (b * Hkv + j) * D, k.data() + (b * Hkv + j + 1) * D, kc + at_);
                std::copy(v.data() + (b * Hkv + j) * D, v.data() + (b * Hkv + j + 1) * D, vc + at_);
            }
        }
        at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
            for (int64_t bh = begin; bh < end; bh++) {
                const int64_t b = bh / H, j = (bh % H) / (H / Hkv);          // query head bh's KV head
                const float *qv = q.data() + bh * D;
                const float *K = kc + ((l * B + b) * Hkv + j) * S * D, *V = vc + ((l * B + b) * Hkv + j) * S * D;
                float *s = scores.data() + bh * (pos + 1), top = -INFINITY, total = 0.0f;
                for (int64_t t = 0; t <= pos; t++) {
                    s[t] = dot_f32(qv, K + t * D, D) * scale;
                    top = std::max(top, s[t]);
                }
                for (int64_t t = 0; t <= pos; t++) { s[t] = std::exp(s[t] - top); total += s[t]; }
                float *o = att.data() + bh * D;
                std::fill(o, o + D, 0.0f);
                for (int64_t t = 0; t <= pos; t++)
                    for (int64_t i = 0; i < D; i++) o[i] += s[t] * V[t * D + i];
                for (int64_t i = 0; i < D; i++) o[i] /= total;
            }
        });
        q4_products(quantize(att.data(), B, H * D, op), B, H * D, {q4(w + 10, C, H * D, y.data())});
        for (int64_t i = 0; i < B * C; i++) x[i] += y[i];
        rmsnorm(x, vec(w + 13, C), B, C, (float)eps, h.data());
        q4_products(quantize(h.data(), B, C, op), B, C, {q4(w + 14, F, C, g.data()), q4(w + 17, F, C, u.data())});
        for (int64_t i = 0; i < B * F; i++) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        q4_products(quantize(g.data(), B, F, op), B, F, {q4(w + 20, C, F, y.data())});
        for (int64_t i = 0; i < B * C; i++) x[i] += y[i];
    }
    return x_out;
}

TORCH_LIBRARY(tinylm, lib) {
    lib.def("q4a8_mm(Tensor x, Tensor nibbles, Tensor d, Tensor z) -> Tensor");
    lib.def("i8a8_mm(Tensor x, Tensor weight, Tensor scale) -> Tensor");
    lib.def("quantize_blocks(Tensor x) -> (Tensor, Tensor, Tensor)");
    lib.def("q4a8_layers(Tensor x, Tensor[] weights, Tensor(a!) k_cache, Tensor(b!) v_cache, int pos, "
            "Tensor cos, Tensor sin, int n_heads, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(tinylm, CPU, lib) {
    lib.impl("q4a8_mm", &q4a8_mm);
    lib.impl("i8a8_mm", &i8a8_mm);
    lib.impl("quantize_blocks", &quantize_blocks);
    lib.impl("q4a8_layers", &q4a8_layers);
}
