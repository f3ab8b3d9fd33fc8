/* Decode batches (a few to a few tens of rows) over 4- and 8-bit weights, with 8-bit activations (AVX512-VNNI).
 *
 * torch's weight-only CPU kernels run one row at a time (their time grows with the rows), and bf16's dense matmul
 * reads 2 bytes a weight. Here the activations of a call are quantized once (symmetric int8, one fp32 scale per
 * BLOCK inputs of a row), and each tile of 16 output features is read once for every row of the call: its codes
 * are expanded in registers and multiplied with every row by the CPU's u8 x s8 dot instruction (vpdpbusd), the
 * int32 sums scaled back to fp32 per BLOCK. Weights are read as 4 or 8 bits, each byte once per call.
 *
 * Layouts (built once by cpu_batched.py from the packed layers' codes):
 *   int4: codes [N/16][K/32][4][16][4] bytes: byte (c, j, b) of a group holds output j's code for input
 *         g*32 + c*8 + b in its low nibble and for input g*32 + c*8 + 4 + b in its high nibble;
 *         sb bf16 [N/16][K/32][2][16]: per output, scale s then bias b, w = q * s + b.
 *   int8: codes [N/16][K/32][8][16][4] bytes: output j's code + 128 for input g*32 + c*4 + b;
 *         scales bf16 [N]: w = (u - 128) * scale.
 * x is bf16 [M][K], y fp32 [M][N]. K must be a multiple of 32, N of 16.
 */
#include <stdint.h>
#include <stdlib.h>

#define TILE 16  /* output features per tile: one vector of sums */
#define BLOCK 32 /* inputs per activation scale, and per int4 weight group */

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>

int mi_batched_available(void) { return 1; }

static inline __m512 bf16x16(const uint16_t *p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

/* Row blocks of x: q = round(x / scale) with scale = max |x| / 127, and the sum of q (for the codes' offset). */
static void quantize(const uint16_t *x, int64_t blocks, int8_t *q, float *scale, int32_t *qsum) {
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < blocks; i++) {
        __m512 lo = bf16x16(x + i * BLOCK), hi = bf16x16(x + i * BLOCK + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(lo, sign), _mm512_and_ps(hi, sign)));
        __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inv)), qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inv));
        _mm_storeu_si128((__m128i *)(q + i * BLOCK), _mm512_cvtsepi32_epi8(qlo));
        _mm_storeu_si128((__m128i *)(q + i * BLOCK + 16), _mm512_cvtsepi32_epi8(qhi));
        qsum[i] = _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
        scale[i] = amax / 127.0f;
    }
}

/* One int4 tile (16 outputs) for rows [0, mr) of q: mr is a constant at each call site, so the row loops unroll
 * and the accumulators stay in registers. */
static inline __attribute__((always_inline)) void int4_tile(
    const int mr, const uint8_t *w, const uint16_t *sb, int64_t groups, const int8_t *q, const float *qscale,
    const int32_t *qsum, float *y, int64_t n) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    const int64_t k = groups * BLOCK;
    __m512 acc[16];
    for (int m = 0; m < mr; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i wv[8];
        for (int c = 0; c < 4; c++) {
            __m512i v = _mm512_loadu_si512(w + g * 256 + c * 64);
            wv[2 * c] = _mm512_and_si512(v, low);
            wv[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        }
        __m512 s = bf16x16(sb + g * 32), b = bf16x16(sb + g * 32 + 16);
        for (int m = 0; m < mr; m++) {
            const int32_t *qa = (const int32_t *)(q + m * k + g * BLOCK);
            __m512i sum = _mm512_setzero_si512();
            for (int d = 0; d < 8; d++) sum = _mm512_dpbusd_epi32(sum, wv[d], _mm512_set1_epi32(qa[d]));
            float sa = qscale[m * groups + g];
            __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(sa));
            acc[m] = _mm512_fmadd_ps(t, s, acc[m]);
            acc[m] = _mm512_fmadd_ps(b, _mm512_set1_ps(sa * (float)qsum[m * groups + g]), acc[m]);
        }
    }
    for (int m = 0; m < mr; m++) _mm512_storeu_ps(y + m * n, acc[m]);
}

static inline __attribute__((always_inline)) void int8_tile(
    const int mr, const uint8_t *w, const uint16_t *scales, int64_t groups, const int8_t *q, const float *qscale,
    const int32_t *qsum, float *y, int64_t n) {
    const int64_t k = groups * BLOCK;
    __m512 acc[16];
    for (int m = 0; m < mr; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i wv[8];
        for (int c = 0; c < 8; c++) wv[c] = _mm512_loadu_si512(w + g * 512 + c * 64);
        for (int m = 0; m < mr; m++) {
            const int32_t *qa = (const int32_t *)(q + m * k + g * BLOCK);
            __m512i sum = _mm512_set1_epi32(-128 * qsum[m * groups + g]);
            for (int d = 0; d < 8; d++) sum = _mm512_dpbusd_epi32(sum, wv[d], _mm512_set1_epi32(qa[d]));
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(qscale[m * groups + g]), acc[m]);
        }
    }
    __m512 s = bf16x16(scales);
    for (int m = 0; m < mr; m++) _mm512_storeu_ps(y + m * n, _mm512_mul_ps(acc[m], s));
}

/* Every row of a tile, in chunks of 16, 8, 4 and 1 rows. */
#define ROWS(TILE_FN, W, S)                                                                                         \
    for (int64_t r = 0; r < rows;) {                                                                               \
        const int8_t *qr = q + r * k;                                                                              \
        const float *sr = qscale + r * groups;                                                                     \
        const int32_t *zr = qsum + r * groups;                                                                     \
        float *yr = y + r * n + t * TILE;                                                                          \
        if (rows - r >= 16) { TILE_FN(16, W, S, groups, qr, sr, zr, yr, n); r += 16; }                              \
        else if (rows - r >= 8) { TILE_FN(8, W, S, groups, qr, sr, zr, yr, n); r += 8; }                            \
        else if (rows - r >= 4) { TILE_FN(4, W, S, groups, qr, sr, zr, yr, n); r += 4; }                            \
        else { TILE_FN(1, W, S, groups, qr, sr, zr, yr, n); r += 1; }                                              \
    }

static int run(int bits, const uint16_t *x, int64_t rows, int64_t k, const uint8_t *w, const uint16_t *s, int64_t n,
               float *y, int threads) {
    if (rows <= 0 || k <= 0 || n <= 0 || k % BLOCK || n % TILE) return 1;
    const int64_t groups = k / BLOCK, tiles = n / TILE;
    int8_t *q = malloc((size_t)(rows * k));
    float *qscale = malloc(sizeof(float) * (size_t)(rows * groups));
    int32_t *qsum = malloc(sizeof(int32_t) * (size_t)(rows * groups));
    if (!q || !qscale || !qsum) {
        free(q), free(qscale), free(qsum);
        return 2;
    }
    quantize(x, rows * groups, q, qscale, qsum);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        if (bits == 4) {
            const uint8_t *wt = w + t * groups * 256;
            const uint16_t *st = s + t * groups * 32;
            ROWS(int4_tile, wt, st)
        } else {
            const uint8_t *wt = w + t * groups * 512;
            const uint16_t *st = s + t * TILE;
            ROWS(int8_tile, wt, st)
        }
    }
    free(q), free(qscale), free(qsum);
    return 0;
}

int mi_batched_int4(const uint16_t *x, int64_t rows, int64_t k, const uint8_t *codes, const uint16_t *sb, int64_t n,
                    float *y, int threads) {
    return run(4, x, rows, k, codes, sb, n, y, threads);
}

int mi_batched_int8(const uint16_t *x, int64_t rows, int64_t k, const uint8_t *codes, const uint16_t *scales,
                    int64_t n, float *y, int threads) {
    return run(8, x, rows, k, codes, scales, n, y, threads);
}

#else /* no AVX512-VNNI: the layers keep torch's kernels */

int mi_batched_available(void) { return 0; }

int mi_batched_int4(const uint16_t *x, int64_t rows, int64_t k, const uint8_t *codes, const uint16_t *sb, int64_t n,
                    float *y, int threads) {
    (void)x, (void)rows, (void)k, (void)codes, (void)sb, (void)n, (void)y, (void)threads;
    return 3;
}

int mi_batched_int8(const uint16_t *x, int64_t rows, int64_t k, const uint8_t *codes, const uint16_t *scales,
                    int64_t n, float *y, int threads) {
    (void)x, (void)rows, (void)k, (void)codes, (void)scales, (void)n, (void)y, (void)threads;
    return 3;
}

#endif
