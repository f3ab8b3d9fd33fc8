/* Grouped matmul over HQQ-packed expert weights: one call runs one projection of every expert of a MoE layer.
 *
 * Rows of x are sorted by expert; expert e owns rows [ends[e-1], ends[e]). For each (expert, tile of output
 * features) the tile's weights are dequantized once into a small per-thread panel (16 rows, a few tens of KiB,
 * it stays in L1/L2), then every row routed to that expert is multiplied against the panel. A full expert is never
 * expanded, and nothing dequantized outlives the tile.
 *
 * Weight layout is HQQ's, axis 1, as stored in the checkpoint (no repacking):
 *   8-bit: codes[e][o * K + k];
 *   4-bit: byte codes[e][(o mod O/2) * K + k] holds output o's code in its high nibble when o < O/2, else in its
 *          low nibble (HQQ's 4bit_u8 pairs the first and second half of the groups);
 *   w[o][k] = (q - zero[e][o * K/G + k/G]) * scale[e][...], scale and zero fp16, computed as q * s + (-(z * s))
 *   in fp32 like the PyTorch path, then rounded to the compute dtype (round = 1: bf16, 2: fp16) so the products
 *   are those of the PyTorch path's dequantized weights.
 * x and y are fp32: [rows, K] and [rows, O]. Rows past ends[E-1] (slots routed to no local expert) are zeroed.
 *
 * Built at first use with the system C compiler (-O3 -march=native -fopenmp); the vector code uses GCC/Clang
 * vector extensions, so it compiles to AVX-512, AVX2 or NEON as the machine has.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef float vf __attribute__((vector_size(64)));
typedef uint8_t vb __attribute__((vector_size(16)));
typedef uint32_t vu __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));

/* uint8 codes -> float through int32: GCC turns a direct uint8 -> float vector conversion into scalar code. */
static inline vf codes_to_float(vb q8) { return __builtin_convertvector(__builtin_convertvector(q8, vi), vf); }

#define LANES 16
#define TILE 16 /* output features per panel */
#define MR 4    /* rows per micro-tile */
#define NR 4    /* panel rows per micro-tile */

static inline float half_to_float(uint16_t h) {
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}

static inline vf round_panel(vf w, int mode) {
    if (mode == 1) { /* round to nearest even bf16 */
        vu u;
        memcpy(&u, &w, sizeof u);
        u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
        memcpy(&w, &u, sizeof u);
    } else if (mode == 2) {
        for (int i = 0; i < LANES; i++) w[i] = (float)(_Float16)w[i];
    }
    return w;
}

static inline float hsum(vf v) {
    float s = 0.0f;
    for (int i = 0; i < LANES; i++) s += v[i];
    return s;
}

/* Dequantize panel row j (output feature o of expert e) into panel[j * K .. j * K + K). */
static void dequant_row(const uint8_t* codes_e, const uint16_t* scale_e, const uint16_t* zero_e, int64_t O,
                        int64_t K, int64_t G, int bits, int round, int64_t o, float* dst) {
    const int64_t groups = K / G;
    const uint8_t* src;
    int shift = 0;
    if (bits == 8) {
        src = codes_e + o * K;
    } else {
        const int64_t half = O / 2;
        src = codes_e + (o % half) * K;
        shift = o < half ? 4 : 0;
    }
    for (int64_t g = 0; g < groups; g++) {
        const float s = half_to_float(scale_e[o * groups + g]);
        const float z = half_to_float(zero_e[o * groups + g]);
        const float b = -(z * s);
        for (int64_t k = g * G; k < (g + 1) * G; k += LANES) {
            vb q8;
            memcpy(&q8, src + k, LANES);
            if (bits == 4) q8 = (q8 >> shift) & 15;
            vf q = codes_to_float(q8);
            vf w = q * s + b;
            w = round_panel(w, round);
            memcpy(dst + k, &w, sizeof w);
        }
    }
}

/* y[rows r0..r0+mr) x [outputs of panel rows j0..j0+nr) += x . panel, over all K. */
static void micro_tile(const float* x, int64_t r0, int mr, const float* panel, int j0, int nr, int64_t K,
                       const int64_t* out_idx, float* y, int64_t O) {
    vf acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = (vf){0};
    for (int64_t k = 0; k < K; k += LANES) {
        vf w[NR], a[MR];
        for (int j = 0; j < NR; j++) {
            if (j < nr) memcpy(&w[j], panel + (j0 + j) * K + k, sizeof(vf));
            else w[j] = (vf){0};
        }
        for (int i = 0; i < MR; i++) {
            if (i < mr) memcpy(&a[i], x + (r0 + i) * K + k, sizeof(vf));
            else a[i] = (vf){0};
        }
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] += a[i] * w[j];
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) y[(r0 + i) * O + out_idx[j0 + j]] = hsum(acc[i][j]);
}

/* Few rows (decode): no panel. NR outputs at a time, each weight dequantized in registers and used by all mr rows;
 * the NR x mr accumulators are independent, so the multiply-adds do not wait on one another. */
static void direct_f32(const float* x, int64_t r0, int mr, const uint8_t* codes_e, const uint16_t* scale_e,
                       const uint16_t* zero_e, int64_t O, int64_t K, int64_t G, int bits, int round,
                       const int64_t* out_idx, int n, float* y) {
    const int64_t groups = K / G;
    for (int j0 = 0; j0 < n; j0 += NR) {
        const int nr = n - j0 < NR ? n - j0 : NR;
        const uint8_t* src[NR];
        int shift[NR];
        for (int j = 0; j < NR; j++) {
            const int64_t o = out_idx[j0 + (j < nr ? j : 0)];
            shift[j] = bits == 4 && o < O / 2 ? 4 : 0;
            src[j] = codes_e + (bits == 8 ? o : o % (O / 2)) * K;
        }
        vf acc[MR][NR];
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] = (vf){0};
        for (int64_t g = 0; g < groups; g++) {
            float s[NR], b[NR];
            for (int j = 0; j < NR; j++) {
                const int64_t m = out_idx[j0 + (j < nr ? j : 0)] * groups + g;
                s[j] = half_to_float(scale_e[m]);
                b[j] = -(half_to_float(zero_e[m]) * s[j]);
            }
            for (int64_t k = g * G; k < (g + 1) * G; k += LANES) {
                vf w[NR];
                for (int j = 0; j < NR; j++) {
                    vb q8;
                    memcpy(&q8, src[j] + k, LANES);
                    if (bits == 4) q8 = (q8 >> shift[j]) & 15;
                    w[j] = round_panel(codes_to_float(q8) * s[j] + b[j], round);
                }
                for (int i = 0; i < mr; i++) {
                    vf a;
                    memcpy(&a, x + (r0 + i) * K + k, sizeof a);
                    for (int j = 0; j < NR; j++) acc[i][j] += a * w[j];
                }
            }
        }
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) y[(r0 + i) * O + out_idx[j0 + j]] = hsum(acc[i][j]);
    }
}

/* Output features of panel `tile`: 8-bit takes TILE consecutive ones; 4-bit takes TILE/2 from each half, so each
 * byte of codes is read once for both of its nibbles. Returns how many. */
static int tile_outputs(int64_t tile, int64_t O, int bits, int64_t* out_idx) {
    int n = 0;
    if (bits == 8) {
        for (int64_t o = tile * TILE; o < O && n < TILE; o++) out_idx[n++] = o;
    } else {
        const int64_t half = O / 2;
        const int64_t first = tile * (TILE / 2);
        for (int64_t p = first; p < half && p < first + TILE / 2; p++) {
            out_idx[n++] = p;
            out_idx[n++] = p + half;
        }
    }
    return n;
}

#ifdef __AVX512BF16__
#include <immintrin.h>
#define HAS_BF16_DOT 1

/* bf16 compute with AVX512-BF16: weights are dequantized to bf16 in registers (RNE, like torch's cast) and
 * multiplied by vdpbf16ps, which sums bf16 products in fp32. x is bf16 [rows, K]; K and G multiples of 32. */

/* 32 weights of output o at k (inside one group): (q * s + b) rounded to bf16. */
static inline __m512bh dequant32(const uint8_t* src, int bits, int shift, __m512 s, __m512 b) {
    __m256i q8 = _mm256_loadu_si256((const __m256i*)src);
    if (bits == 4) q8 = _mm256_and_si256(_mm256_srli_epi16(q8, shift), _mm256_set1_epi8(15));
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q8)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q8, 1)));
    return _mm512_cvtne2ps_pbh(_mm512_fmadd_ps(hi, s, b), _mm512_fmadd_ps(lo, s, b));
}

static inline const uint8_t* code_row(const uint8_t* codes_e, int64_t O, int64_t K, int bits, int64_t o, int* shift) {
    if (bits == 8) {
        *shift = 0;
        return codes_e + o * K;
    }
    *shift = o < O / 2 ? 4 : 0;
    return codes_e + (o % (O / 2)) * K;
}

static void dequant_row_bf16(const uint8_t* codes_e, const uint16_t* scale_e, const uint16_t* zero_e, int64_t O,
                             int64_t K, int64_t G, int bits, int64_t o, uint16_t* dst) {
    int shift;
    const uint8_t* src = code_row(codes_e, O, K, bits, o, &shift);
    const int64_t groups = K / G;
    for (int64_t g = 0; g < groups; g++) {
        const float sf = half_to_float(scale_e[o * groups + g]);
        const __m512 s = _mm512_set1_ps(sf), b = _mm512_set1_ps(-(half_to_float(zero_e[o * groups + g]) * sf));
        for (int64_t k = g * G; k < (g + 1) * G; k += 32)
            _mm512_storeu_si512((void*)(dst + k), (__m512i)dequant32(src + k, bits, shift, s, b));
    }
}

/* Rows r0..r0+mr (mr <= MR) against panel rows j0..j0+nr (nr <= NR). */
static void micro_tile_bf16(const uint16_t* x, int64_t r0, int mr, const uint16_t* panel, int j0, int nr,
                            int64_t K, const int64_t* out_idx, float* y, int64_t O) {
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) {
        __m512bh w[NR], a[MR];
        for (int j = 0; j < NR; j++)
            w[j] = (__m512bh)(j < nr ? _mm512_loadu_si512((const void*)(panel + (j0 + j) * K + k))
                                     : _mm512_setzero_si512());
        for (int i = 0; i < MR; i++)
            a[i] = (__m512bh)(i < mr ? _mm512_loadu_si512((const void*)(x + (r0 + i) * K + k))
                                     : _mm512_setzero_si512());
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a[i], w[j]);
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) y[(r0 + i) * O + out_idx[j0 + j]] = _mm512_reduce_add_ps(acc[i][j]);
}

/* Few rows (decode): no panel. NR outputs at a time, each weight dequantized in registers and used by all mr rows;
 * the NR x mr accumulators are independent, so the dot instructions do not wait on one another. */
static void direct_bf16(const uint16_t* x, int64_t r0, int mr, const uint8_t* codes_e, const uint16_t* scale_e,
                        const uint16_t* zero_e, int64_t O, int64_t K, int64_t G, int bits, const int64_t* out_idx,
                        int n, float* y) {
    const int64_t groups = K / G;
    for (int j0 = 0; j0 < n; j0 += NR) {
        const int nr = n - j0 < NR ? n - j0 : NR;
        const uint8_t* src[NR];
        int shift[NR];
        for (int j = 0; j < NR; j++) src[j] = code_row(codes_e, O, K, bits, out_idx[j0 + (j < nr ? j : 0)], &shift[j]);
        __m512 acc[MR][NR];
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps();
        for (int64_t g = 0; g < groups; g++) {
            __m512 s[NR], b[NR];
            for (int j = 0; j < NR; j++) {
                const int64_t m = out_idx[j0 + (j < nr ? j : 0)] * groups + g;
                const float sf = half_to_float(scale_e[m]);
                s[j] = _mm512_set1_ps(sf);
                b[j] = _mm512_set1_ps(-(half_to_float(zero_e[m]) * sf));
            }
            for (int64_t k = g * G; k < (g + 1) * G; k += 32) {
                __m512bh w[NR];
                for (int j = 0; j < NR; j++) w[j] = dequant32(src[j] + k, bits, shift[j], s[j], b[j]);
                for (int i = 0; i < mr; i++) {
                    const __m512bh a = (__m512bh)_mm512_loadu_si512((const void*)(x + (r0 + i) * K + k));
                    for (int j = 0; j < NR; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a, w[j]);
                }
            }
        }
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) y[(r0 + i) * O + out_idx[j0 + j]] = _mm512_reduce_add_ps(acc[i][j]);
    }
}

static int grouped_bf16(const uint16_t* x, const int64_t* ends, const uint8_t* codes,
                        const uint16_t* scale, const uint16_t* zero, int64_t E, int64_t O, int64_t K, int64_t G,
                        int bits, float* y, int threads) {
    const int64_t per_tile = bits == 8 ? TILE : TILE / 2;
    const int64_t tiles = ((bits == 8 ? O : O / 2) + per_tile - 1) / per_tile;
    const int64_t code_bytes = bits == 8 ? O * K : O / 2 * K;
    const int64_t groups = O * (K / G);
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        uint16_t* panel = aligned_alloc(64, (size_t)(TILE * K) * sizeof(uint16_t));
        if (panel == NULL) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < E * tiles; item++) {
            const int64_t e = item / tiles, tile = item % tiles;
            const int64_t start = e > 0 ? ends[e - 1] : 0, stop = ends[e];
            if (stop <= start || panel == NULL) continue;
            int64_t out_idx[TILE];
            const int n = tile_outputs(tile, O, bits, out_idx);
            const uint8_t* codes_e = codes + e * code_bytes;
            if (stop - start <= MR) {
                direct_bf16(x, start, (int)(stop - start), codes_e, scale + e * groups, zero + e * groups, O, K, G,
                            bits, out_idx, n, y);
                continue;
            }
            for (int j = 0; j < n; j++)
                dequant_row_bf16(codes_e, scale + e * groups, zero + e * groups, O, K, G, bits, out_idx[j],
                                 panel + j * K);
            for (int64_t r = start; r < stop; r += MR) {
                const int mr = stop - r < MR ? (int)(stop - r) : MR;
                for (int j = 0; j < n; j += NR)
                    micro_tile_bf16(x, r, mr, panel, j, n - j < NR ? n - j : NR, K, out_idx, y, O);
            }
        }
        free(panel);
    }
    return failed ? 2 : 0;
}
#else
#define HAS_BF16_DOT 0
#endif

/* 1 when mi_grouped_matmul_bf16 runs on bf16 dot-product instructions; else the caller converts x to fp32. */
int mi_has_bf16_dot(void) { return HAS_BF16_DOT; }

/* The bf16 entry point: x bf16 [rows, K], K and G multiples of 32. Returns 3 when not built with AVX512-BF16. */
int mi_grouped_matmul_bf16(const uint16_t* x, int64_t rows, const int64_t* ends, const uint8_t* codes,
                           const uint16_t* scale, const uint16_t* zero, int64_t E, int64_t O, int64_t K, int64_t G,
                           int bits, float* y, int threads) {
    if ((bits != 8 && bits != 4) || K % 32 || G % 32 || K % G || (bits == 4 && O % 2)) return 1;
    const int64_t used = E > 0 ? ends[E - 1] : 0;
    if (used < rows) memset(y + used * O, 0, (size_t)((rows - used) * O) * sizeof(float));
#if HAS_BF16_DOT
    return grouped_bf16(x, ends, codes, scale, zero, E, O, K, G, bits, y, threads);
#else
    (void)x; (void)codes; (void)scale; (void)zero; (void)threads;
    return 3;
#endif
}

int mi_grouped_matmul(const float* x, int64_t rows, const int64_t* ends, const uint8_t* codes,
                      const uint16_t* scale, const uint16_t* zero, int64_t E, int64_t O, int64_t K, int64_t G,
                      int bits, int round, float* y, int threads) {
    if ((bits != 8 && bits != 4) || K % LANES || G % LANES || K % G || (bits == 4 && O % 2)) return 1;
    const int64_t per_tile = bits == 8 ? TILE : TILE / 2;
    const int64_t tiles = ((bits == 8 ? O : O / 2) + per_tile - 1) / per_tile;
    const int64_t code_bytes = bits == 8 ? O * K : O / 2 * K;
    const int64_t groups = O * (K / G);
    const int64_t used = E > 0 ? ends[E - 1] : 0;
    if (used < rows) memset(y + used * O, 0, (size_t)((rows - used) * O) * sizeof(float));
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        float* panel = aligned_alloc(64, (size_t)(TILE * K) * sizeof(float));
        if (panel == NULL) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < E * tiles; item++) {
            const int64_t e = item / tiles, tile = item % tiles;
            const int64_t start = e > 0 ? ends[e - 1] : 0, stop = ends[e];
            if (stop <= start || panel == NULL) continue;
            int64_t out_idx[TILE];
            const int n = tile_outputs(tile, O, bits, out_idx);
            if (stop - start <= MR) {
                direct_f32(x, start, (int)(stop - start), codes + e * code_bytes, scale + e * groups,
                           zero + e * groups, O, K, G, bits, round, out_idx, n, y);
                continue;
            }
            for (int j = 0; j < n; j++)
                dequant_row(codes + e * code_bytes, scale + e * groups, zero + e * groups, O, K, G, bits, round,
                            out_idx[j], panel + j * K);
            for (int64_t r = start; r < stop; r += MR) {
                const int mr = stop - r < MR ? (int)(stop - r) : MR;
                for (int j = 0; j < n; j += NR)
                    micro_tile(x, r, mr, panel, j, n - j < NR ? n - j : NR, K, out_idx, y, O);
            }
        }
        free(panel);
    }
    return failed ? 2 : 0;
}
