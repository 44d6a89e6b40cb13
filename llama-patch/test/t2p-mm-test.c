/*
 * Standalone test of llama-patch/t2p-mm.h against libt2p (no ggml needed): the quantize /
 * barrier / row-split / gemv-gemm sequence of the T2P buffer type, with nth threads emulated
 * one after the other, must give bit for bit what one whole-matrix call of the scalar oracle
 * gives, for single columns, batches with leftovers, several planes (contiguous and strided),
 * padded dst columns and any thread count, with each activation type: q8_K (tq1_0 / tq2_0
 * weights), q8_0 through t2p_quantize_q8_0, and q8_0 through a ggml-style quantizer (a C model
 * of ggml's x86 quantize_row_q8_0, written here from its definition, standing in for the real
 * one). T2P_VERIFY's comparisons (outputs, and t2p's q8_0 quantizer against ggml's) must find 0
 * differences and must catch an injected one. Run by llama-patch/check.sh.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t2p-mm.h"

float t2p_f16_for_test(uint16_t h);

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t) (rng >> 16);
}
static float next_f(void) { return ((float) (next_u32() % 20001) - 10000.0f) / 2500.0f; }

static int failures = 0;
#define CHECK(cond, ...)                                             \
    do {                                                             \
        if (!(cond)) {                                               \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                            \
            fprintf(stderr, "\n");                                   \
            failures++;                                              \
        }                                                            \
    } while (0)

/* float to IEEE half, round to nearest even (as F16C and ggml's GGML_FP32_TO_FP16). */
static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t) (sign | 0x7c00u | (man ? 0x200u : 0));
    int e = (int) exp - 127 + 15;
    if (e >= 31) return (uint16_t) (sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t) sign;
        uint32_t m = man | 0x800000u, shift = (uint32_t) (14 - e);
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (h & 1))) h++;
        return (uint16_t) (sign | h);
    }
    uint32_t h = sign | ((uint32_t) e << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t) h;
}

/* Stand-in for ggml's x86 quantize_row_q8_0 (ggml_from_float_t): block_q8_0 { fp16 d; int8 qs[32]; },
 * d = fp16(amax / 127), q = round-half-even(x * (127 / amax)). */
static int ggml_model_calls = 0;
static void ggml_model_quantize_q8_0(const float * x, void * vy, int64_t k) {
    uint8_t * y = vy;
    ggml_model_calls++;
    for (int64_t b = 0; b < k / 32; b++, y += 34) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
        const uint16_t d = float_to_half(amax / 127.f);
        memcpy(y, &d, 2);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int i = 0; i < 32; i++) {
            const float q = nearbyintf(x[32 * b + i] * id);
            y[2 + i] = (uint8_t) (int8_t) (q > 127.f ? 127 : q < -128.f ? -128 : (int) q);
        }
    }
}

/* The configuration under test (set by main). */
static t2p_mm_act        g_act  = T2P_MM_Q8_K;
static t2p_mm_from_float g_hook = NULL;
static const char *      g_name = "q8_K";

static const uint32_t SENTINEL = 0x7FC0DEADu; /* a NaN that no kernel produces */

/* One case: rows x k weights; src1 is ne11 x ne12 x ne13 columns, with `xpad` extra floats after
 * each column and `dpad` after each dst column; src1 planes `xgap` and dst planes `dgap` columns
 * apart (0: contiguous). */
static void run_case(size_t rows, size_t k, size_t ne11, size_t ne12, size_t ne13, size_t xpad, size_t dpad,
                     size_t xgap, size_t dgap, int nth) {
    size_t wbytes = 0;
    CHECK(t2p_repack_size(rows, k, &wbytes) == T2P_STATUS_OK, "repack_size");
    t2p_block_pq2_0 * pq = malloc(wbytes);
    void *            w  = malloc(wbytes);
    for (size_t b = 0; b < rows * k / 128; b++) {
        pq[b].d = (uint16_t) (0x3000 + next_u32() % 0x1000); /* fp16 0.125 .. 1 */
        for (int i = 0; i < 32; i++) {
            pq[b].qs[i] = (uint8_t) next_u32(); /* includes code 3 (+2) */
        }
    }
    CHECK(t2p_repack_pq2_0(pq, wbytes, w, wbytes, rows, k) == T2P_STATUS_OK, "repack");

    const size_t ldx   = k + xpad, ldd = rows + dpad;
    const size_t nb11  = ldx * 4, nb12 = (ne11 + xgap) * nb11, nb13 = ne12 * nb12;
    const size_t nb1   = ldd * 4, nb2 = (ne11 + dgap) * nb1, nb3 = ne12 * nb2;
    const size_t xlen  = ne13 * nb13 / 4, dlen = ne13 * nb3 / 4;
    float *      x     = malloc(xlen * 4);
    float *      dst   = malloc(dlen * 4);
    for (size_t i = 0; i < xlen; i++) {
        x[i] = next_f();
    }
    for (size_t i = 0; i < dlen; i++) {
        memcpy(&dst[i], &SENTINEL, 4);
    }

    t2p_mm m;
    CHECK(t2p_mm_init(&m, g_act, w, wbytes, rows, k, x, ne11, ne12, ne13, nb11, nb12, nb13, dst, nb1, nb2, nb3) ==
              T2P_STATUS_OK,
          "init");
    m.q8_0_from_float = g_hook;
    if (xgap == 0 && dgap == 0 && ne12 * ne13 > 1) {
        CHECK(m.ne2 * m.ne3 == 1 && m.ncols == ne11 * ne12 * ne13, "contiguous planes should merge");
    }
    const size_t wsize = t2p_mm_work_size(&m);
    void *       wdata = malloc(wsize + 64);
    for (int ith = 0; ith < nth; ith++) {
        CHECK(t2p_mm_quantize(&m, wdata, wsize, ith, nth) == T2P_STATUS_OK, "quantize");
    }
    /* barrier; then the row chunks, in an order that is not the natural one */
    const size_t nchunk = t2p_mm_chunk_count(rows, nth);
    for (size_t i = 0; i < nchunk; i++) {
        size_t b, e;
        t2p_mm_chunk_rows(rows, (i * 7 + 3) % nchunk, nchunk, &b, &e);
        CHECK(t2p_mm_compute(&m, wdata, b, e) == T2P_STATUS_OK, "compute");
    }

    /* Expected: per plane, one whole-matrix scalar-oracle call on freshly quantized columns. */
    size_t max_diff = 0;
    for (size_t i3 = 0; i3 < ne13; i3++) {
        for (size_t i2 = 0; i2 < ne12; i2++) {
            const float * xp = (const float *) ((const char *) x + i2 * nb12 + i3 * nb13);
            const float * dp = (const float *) ((const char *) dst + i2 * nb2 + i3 * nb3);
            size_t        q8 = 0, q8x4 = 0, q80 = 0;
            t2p_activation_size(k, ne11, &q8, &q8x4);
            t2p_activation_size_q8_0(k, ne11, &q80);
            void *  y   = malloc(q8x4 + q8 + q80);
            float * ref = malloc(ne11 * rows * 4);
            if (g_act == T2P_MM_Q8_0) {
                /* always t2p's quantizer: with the ggml stand-in the results must agree too */
                for (size_t c = 0; c < ne11; c++) {
                    CHECK(t2p_quantize_q8_0(xp + c * ldx, k, (char *) y + c * (k / 128) * 160, q80 - c * (k / 128) * 160) ==
                              T2P_STATUS_OK,
                          "ref quantize q8_0");
                }
                if (ne11 == 1) {
                    CHECK(t2p_gemv_q8_0_reference(w, wbytes, rows, k, y, q80, ref, rows, 0, rows) == T2P_STATUS_OK,
                          "ref gemv q8_0");
                } else {
                    CHECK(t2p_gemm_q8_0_reference(w, wbytes, rows, k, y, q80, ne11, ref, rows, ne11 * rows, 0, rows) ==
                              T2P_STATUS_OK,
                          "ref gemm q8_0");
                }
            } else if (ne11 == 1) {
                CHECK(t2p_quantize_q8_K(xp, k, y, q8) == T2P_STATUS_OK, "ref quantize");
                CHECK(t2p_gemv_reference(w, wbytes, rows, k, y, q8, ref, rows, 0, rows) == T2P_STATUS_OK, "ref gemv");
            } else {
                CHECK(t2p_quantize_q8_K_x4(xp, ldx, k, ne11, y, q8x4) == T2P_STATUS_OK, "ref quantize x4");
                CHECK(t2p_gemm_reference(w, wbytes, rows, k, y, q8x4, ne11, ref, rows, ne11 * rows, 0, rows) ==
                          T2P_STATUS_OK,
                      "ref gemm");
            }
            for (size_t c = 0; c < ne11; c++) {
                /* semantic sanity: close to the float dot product */
                for (size_t r = 0; r < rows; r++) {
                    /* q8_K rounds each activation by at most amax/254 (per 256-block amax); q8_0 by
                     * amax/254 per 32-block plus amax/2048 from its fp16 scale */
                    const size_t qk  = g_act == T2P_MM_Q8_0 ? 32 : 256;
                    const double rel = g_act == T2P_MM_Q8_0 ? 1.0 / 254 + 1.0 / 2048 : 1.0 / 254;
                    double exact = 0, bound = 0, amax = 0;
                    for (size_t j = 0; j < k; j++) {
                        if (j % qk == 0) {
                            amax = 0;
                            for (size_t jj = j; jj < j + qk; jj++) {
                                if (fabs(xp[c * ldx + jj]) > amax) amax = fabs(xp[c * ldx + jj]);
                            }
                        }
                        const t2p_block_pq2_0 * blk = &pq[(r * k + j) / 128];
                        const size_t            jj  = j % 128;
                        const int   u  = (blk->qs[jj / 4] >> (2 * (jj % 4))) & 3;
                        const float dw = t2p_f16_for_test(blk->d);
                        exact += (double) (u - 1) * dw * xp[c * ldx + j];
                        bound += fabs((double) (u - 1) * dw) * (amax * rel + 1e-5 * amax);
                    }
                    const float got = dp[c * ldd + r];
                    CHECK(fabs(got - exact) <= bound + 1e-4,
                          "rows %zu k %zu col %zu row %zu: %g vs float %g", rows, k, c, r, got, exact);
                    if (memcmp(&got, &ref[c * rows + r], 4) != 0) {
                        max_diff++;
                    }
                }
                for (size_t r = rows; r < ldd; r++) {
                    CHECK(memcmp(&dp[c * ldd + r], &SENTINEL, 4) == 0, "padding of dst column written");
                }
            }
            free(y);
            free(ref);
        }
    }
    CHECK(max_diff == 0, "%s: rows %zu k %zu cols %zu x %zu x %zu nth %d: %zu outputs differ from the oracle", g_name,
          rows, k, ne11, ne12, ne13, nth, max_diff);

    /* T2P_VERIFY's quantizer check: ggml's (stand-in) quantizer and t2p's agree on every quad,
     * and a corrupted quad is found. */
    if (g_act == T2P_MM_Q8_0 && g_hook != NULL) {
        size_t quads = 0, diff = 0;
        for (int ith = 0; ith < nth; ith++) {
            size_t nq = 0, nd = 1;
            CHECK(t2p_mm_quantize_check(&m, wdata, ith, nth, &nq, &nd) == T2P_STATUS_OK, "quantize check");
            quads += nq;
            diff += nd;
        }
        CHECK(quads == ne11 * ne12 * ne13 * (k / 128) && diff == 0, "quantize check: %zu of %zu quads differ", diff,
              quads);
        ((uint8_t *) wdata)[wsize - 1] ^= 0x40; /* the last value of the last quad */
        diff = 0;
        for (int ith = 0; ith < nth; ith++) {
            size_t nq = 0, nd = 0;
            t2p_mm_quantize_check(&m, wdata, ith, nth, &nq, &nd);
            diff += nd;
        }
        CHECK(diff == 1, "corrupted quad found %zu times", diff);
        ((uint8_t *) wdata)[wsize - 1] ^= 0x40;
    } else {
        size_t nq = 1, nd = 1;
        CHECK(t2p_mm_quantize_check(&m, wdata, 0, 1, &nq, &nd) == T2P_STATUS_OK && nq == 0 && nd == 0,
              "no quantizer check without a ggml quantizer");
    }

    /* T2P_VERIFY's check: zero, then an injected one-ulp error is found. */
    float * scratch = malloc(t2p_mm_verify_scratch(&m) * 4);
    size_t  total   = 0;
    float   worst   = 0;
    for (size_t i = 0; i < nchunk; i++) {
        float  mx = -1;
        size_t nd = 1, b, e;
        t2p_mm_chunk_rows(rows, i, nchunk, &b, &e);
        CHECK(t2p_mm_verify(&m, wdata, b, e, scratch, t2p_mm_verify_scratch(&m), &mx, &nd) == T2P_STATUS_OK,
              "verify");
        total += nd;
        if (mx > worst) worst = mx;
    }
    CHECK(total == 0 && worst == 0.0f, "verify found %zu differences (max %g)", total, worst);
    {
        float * victim = (float *) ((char *) dst + (ne12 - 1) * nb2 + (ne13 - 1) * nb3) + (ne11 - 1) * ldd + rows - 1;
        uint32_t bits;
        memcpy(&bits, victim, 4);
        bits ^= 1;
        memcpy(victim, &bits, 4);
        total = 0;
        for (size_t i = 0; i < nchunk; i++) {
            float  mx = 0;
            size_t nd = 0, b, e;
            t2p_mm_chunk_rows(rows, i, nchunk, &b, &e);
            t2p_mm_verify(&m, wdata, b, e, scratch, t2p_mm_verify_scratch(&m), &mx, &nd);
            total += nd;
        }
        CHECK(total == 1, "injected difference found %zu times", total);
    }

    free(scratch);
    free(wdata);
    free(x);
    free(dst);
    free(w);
    free(pq);
}

/* fp16 -> float for the sanity check (normal numbers only, which is all run_case makes). */
float t2p_f16_for_test(uint16_t h) {
    const uint32_t e = (h >> 10) & 0x1F, mant = h & 0x3FF;
    const float    v = ldexpf(1.0f + mant / 1024.0f, (int) e - 15);
    return (h & 0x8000) ? -v : v;
}

int main(void) {
    printf("t2p %s, isa %s\n", t2p_version(), t2p_isa_name(t2p_active_isa()));

    /* thread splits: rows in groups of 4, some threads with nothing to do */
    size_t b, e;
    t2p_mm_chunk_rows(12, 0, 5, &b, &e);
    CHECK(b == 0 && e == 0, "chunk 0 of 5 over 12 rows: %zu..%zu", b, e);
    size_t covered = 0;
    for (int ith = 0; ith < 5; ith++) {
        t2p_mm_chunk_rows(12, ith, 5, &b, &e);
        CHECK(b % 4 == 0 && e % 4 == 0 && b == covered, "split");
        covered = e;
    }
    CHECK(covered == 12, "split covers all rows");
    CHECK(t2p_mm_chunk_count(12, 1) == 1 && t2p_mm_chunk_count(12, 2) == 3 && t2p_mm_chunk_count(4096, 2) == 8,
          "chunk counts");
    covered = 0;
    for (size_t i = 0; i < t2p_mm_chunk_count(1000, 3); i++) {
        t2p_mm_chunk_rows(1000, i, t2p_mm_chunk_count(1000, 3), &b, &e);
        CHECK(b % 4 == 0 && e % 4 == 0 && b == covered && e > b, "chunks of 1000 rows");
        covered = e;
    }
    CHECK(covered == 1000, "chunks cover all rows");

    /* shapes the buffer type must refuse */
    t2p_mm m;
    float  dummy = 0;
    CHECK(t2p_mm_init(&m, T2P_MM_Q8_0, &dummy, 1 << 20, 6, 256, &dummy, 1, 1, 1, 1024, 1024, 1024, &dummy, 24, 24, 24) ==
              T2P_STATUS_INVALID_SHAPE,
          "rows %% 4");
    CHECK(t2p_mm_init(&m, T2P_MM_Q8_K, &dummy, 1 << 20, 8, 128, &dummy, 1, 1, 1, 512, 512, 512, &dummy, 32, 32, 32) ==
              T2P_STATUS_INVALID_SHAPE,
          "k %% 256");

    CHECK(t2p_mm_init(&m, (t2p_mm_act) 7, &dummy, 1 << 20, 8, 256, &dummy, 1, 1, 1, 1024, 1024, 1024, &dummy, 32, 32,
                      32) == T2P_STATUS_INVALID_ARGUMENT,
          "unknown activation type");
    CHECK(t2p_mm_init(&m, T2P_MM_Q8_0, &dummy, 8 * 256 / 128 * 34 - 1, 8, 256, &dummy, 1, 1, 1, 1024, 1024, 1024, &dummy,
                      32, 32, 32) == T2P_STATUS_BUFFER_TOO_SMALL,
          "weights shorter than T2P");

    static const t2p_mm_act        acts[]  = { T2P_MM_Q8_K, T2P_MM_Q8_0, T2P_MM_Q8_0 };
    static const t2p_mm_from_float hooks[] = { NULL, NULL, ggml_model_quantize_q8_0 };
    static const char * const      names[] = { "q8_K", "q8_0 (t2p_quantize_q8_0)", "q8_0 (ggml-style quantizer)" };
    static const size_t cols[] = { 1, 2, 3, 4, 5, 7, 8, 13 };
    static const int    nths[] = { 1, 2, 3, 5 };
    for (size_t a = 0; a < 3; a++) {
        g_act  = acts[a];
        g_hook = hooks[a];
        g_name = names[a];
        const int failures_before = failures;
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
            for (size_t ti = 0; ti < sizeof nths / sizeof nths[0]; ti++) {
                run_case(12, 512, cols[ci], 1, 1, 0, 0, 0, 0, nths[ti]);
            }
        }
        run_case(16, 256, 3, 2, 3, 0, 0, 0, 0, 2);  /* contiguous planes: merged into one batch */
        run_case(16, 256, 3, 2, 3, 8, 4, 0, 0, 3);  /* padded columns, planes still back to back: merged */
        run_case(16, 256, 3, 2, 3, 8, 4, 1, 2, 3);  /* strided planes, padded columns */
        run_case(16, 256, 2, 3, 1, 0, 0, 0, 1, 2);  /* src1 contiguous, dst planes strided: no merge */
        run_case(16, 256, 2, 1, 3, 0, 0, 1, 0, 2);  /* dst contiguous, src1 planes strided: no merge */
        run_case(8, 768, 1, 3, 2, 0, 0, 2, 1, 2);   /* single-column planes, strided */
        run_case(8, 768, 1, 3, 2, 0, 0, 0, 0, 2);   /* single-column planes, merged into a batch */
        run_case(4, 256, 1, 1, 1, 0, 0, 0, 0, 2);   /* one row group, two threads */
        run_case(8, 4608, 3, 1, 1, 0, 0, 0, 0, 2);  /* q8_0: more quads per column than one quantizer call */
        printf("  %s: %s\n", g_name, failures == failures_before ? "ok" : "FAILED");
    }
    CHECK(ggml_model_calls > 0, "the ggml-style quantizer was used");

    if (failures) {
        fprintf(stderr, "t2p-mm-test: %d failures\n", failures);
        return 1;
    }
    printf("t2p-mm-test: ok\n");
    return 0;
}
