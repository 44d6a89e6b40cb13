/*
 * Standalone test of llama-patch/t2p-mm.h against libt2p (no ggml needed): the quantize /
 * barrier / row-chunk sequence of the T2P buffer type, with nth threads emulated one after the
 * other and the chunks taken out of order, must give bit for bit what one whole-plane call of
 * the scalar oracle gives (a one-plane t2p plan, one share, all rows), and stay within the
 * quantization error of the float dot product, for single columns, batches with leftovers,
 * several planes (contiguous: merged into one batch; strided: plane by plane), padded dst
 * columns, rows that are not a multiple of 4, k = 384 / 640 (q8_0 forced) and any thread
 * count, with each activation type: q8_K (tq1_0 / tq2_0 weights), q8_0 through t2p's quantizer,
 * and q8_0 through a ggml-style from_float (a C model of ggml's x86 quantize_row_q8_0, written
 * here from its definition, standing in for the real one). T2P_VERIFY's comparison must find 0
 * differences and must catch an injected one. Run by llama-patch/check.sh.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tests/c/half.h" /* shared with tests/c/test_abi.c */
#include "t2p-mm.h"

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
static uint32_t         g_act  = T2P_ACT_Q8_K;
static T2pQ8_0FromFloat g_hook = NULL;
static const char *     g_name = "q8_K";

static const uint32_t SENTINEL = 0x7FC0DEADu; /* a NaN that no kernel produces */

/* One case: rows x k weights; src1 is ne11 x ne12 x ne13 columns, with `xpad` extra floats after
 * each column and `dpad` after each dst column; src1 planes `xgap` and dst planes `dgap` columns
 * apart (0: contiguous). */
static void run_case(size_t rows, size_t k, size_t ne11, size_t ne12, size_t ne13, size_t xpad, size_t dpad,
                     size_t xgap, size_t dgap, int nth) {
    size_t wbytes = 0;
    const size_t pq_bytes = rows * k / 128 * 34;
    CHECK(t2p_repack_size(rows, k, &wbytes) == T2P_STATUS_OK, "repack_size");
    uint8_t * pq = malloc(pq_bytes);
    void *    w  = malloc(wbytes);
    for (size_t b = 0; b < rows * k / 128; b++) {
        const uint16_t d = (uint16_t) (0x3000 + next_u32() % 0x1000); /* fp16 0.125 .. 1 */
        memcpy(pq + b * 34, &d, 2);
        for (int i = 0; i < 32; i++) {
            pq[b * 34 + 2 + i] = (uint8_t) next_u32(); /* includes code 3 (+2) */
        }
    }
    CHECK(t2p_repack(T2P_TYPE_PQ2_0, pq, pq_bytes, w, wbytes, rows, k) == T2P_STATUS_OK, "repack");

    const size_t ldx  = k + xpad, ldd = rows + dpad;
    const size_t nb11 = ldx * 4, nb12 = (ne11 + xgap) * nb11, nb13 = ne12 * nb12;
    const size_t nb1  = ldd * 4, nb2 = (ne11 + dgap) * nb1, nb3 = ne12 * nb2;
    const size_t xlen = ne13 * nb13 / 4, dlen = ne13 * nb3 / 4;
    float *      x    = malloc(xlen * 4);
    float *      dst  = malloc(dlen * 4);
    for (size_t i = 0; i < xlen; i++) {
        x[i] = next_f();
    }
    for (size_t i = 0; i < dlen; i++) {
        memcpy(&dst[i], &SENTINEL, 4);
    }

    t2p_mm m;
    CHECK(t2p_mm_init(&m, T2P_TYPE_PQ2_0, g_act, w, wbytes, rows, k, x, ne11, ne12, ne13, nb11, nb12, nb13, dst, nb1, nb2, nb3, g_hook,
                      1) == T2P_STATUS_OK,
          "init");
    const int merged = xgap == 0 && dgap == 0;
    CHECK(t2p_mm_planes(&m) == (merged ? 1 : ne12 * ne13) && m.plan.ncols == (merged ? ne11 * ne12 * ne13 : ne11),
          "planes merge exactly when src1 and dst planes are back to back");
    CHECK(m.plan.act == (k % 256 ? T2P_ACT_Q8_0 : g_act) && (m.from_float != NULL) == (m.plan.act == T2P_ACT_Q8_0 && g_hook),
          "activation type");
    const size_t wsize = t2p_mm_work_size(&m);
    CHECK(wsize == t2p_mm_planes(&m) * (m.plan.work_bytes + t2p_mm_out_len(&m) * 4), "work size with verify");
    void * wdata = malloc(wsize);
    for (int ith = nth; ith-- > 0;) {
        CHECK(t2p_mm_quantize(&m, wdata, ith, nth) == T2P_STATUS_OK, "quantize");
    }
    /* barrier; then the row chunks, in an order that is not the natural one */
    const size_t nchunk = t2p_mm_chunks(&m, nth);
    size_t       n_diff = 0;
    for (size_t j = 0; j < nchunk; j++) {
        const size_t i = nchunk % 7 ? (j * 7 + 3) % nchunk : nchunk - 1 - j;
        size_t       d = 1;
        CHECK(t2p_mm_compute(&m, wdata, i, nchunk) == T2P_STATUS_OK, "compute");
        CHECK(t2p_mm_verify(&m, wdata, i, nchunk, &d) == T2P_STATUS_OK, "verify");
        n_diff += d;
    }
    CHECK(n_diff == 0, "T2P_VERIFY found %zu differences", n_diff);

    /* Expected: per plane, one whole-plane oracle call on freshly quantized columns. */
    size_t n_bad = 0;
    for (size_t i3 = 0; i3 < ne13; i3++) {
        for (size_t i2 = 0; i2 < ne12; i2++) {
            const float * xp = (const float *) ((const char *) x + i2 * nb12 + i3 * nb13);
            const float * dp = (const float *) ((const char *) dst + i2 * nb2 + i3 * nb3);
            T2pPlan       plan;
            CHECK(t2p_plan_init(&plan, g_act, rows, k, ne11) == T2P_STATUS_OK, "oracle plan");
            void *  y   = malloc(plan.work_bytes);
            float * ref = malloc(ne11 * rows * 4);
            CHECK(t2p_plan_quantize(&plan, xp, ldx, (ne11 - 1) * ldx + k, g_hook, y, plan.work_bytes, 0, 1) ==
                      T2P_STATUS_OK,
                  "oracle quantize");
            CHECK(t2p_plan_compute(&plan, T2P_ISA_SCALAR, w, wbytes, y, plan.work_bytes, ref, rows, ne11 * rows, 0,
                                   rows) == T2P_STATUS_OK,
                  "oracle compute");
            for (size_t c = 0; c < ne11; c++) {
                for (size_t r = 0; r < rows; r++) {
                    /* semantic sanity: close to the float dot product. q8_K rounds each activation by
                     * at most amax/254 (per 256-block amax); q8_0 by amax/254 per 32-block plus
                     * amax/2048 from its fp16 scale */
                    const size_t qk  = plan.act == T2P_ACT_Q8_0 ? 32 : 256;
                    const double rel = plan.act == T2P_ACT_Q8_0 ? 1.0 / 254 + 1.0 / 2048 : 1.0 / 254;
                    double exact = 0, bound = 0, amax = 0;
                    for (size_t j = 0; j < k; j++) {
                        if (j % qk == 0) {
                            amax = 0;
                            for (size_t jj = j; jj < j + qk; jj++) {
                                if (fabs(xp[c * ldx + jj]) > amax) amax = fabs(xp[c * ldx + jj]);
                            }
                        }
                        const uint8_t * blk = pq + (r * k + j) / 128 * 34;
                        uint16_t        d;
                        memcpy(&d, blk, 2);
                        const int   u  = (blk[2 + (j % 128) / 4] >> (2 * (j % 4))) & 3;
                        const float dw = half_to_float(d);
                        exact += (double) (u - 1) * dw * xp[c * ldx + j];
                        bound += fabs((double) (u - 1) * dw) * (amax * rel + 1e-5 * amax);
                    }
                    const float got = dp[c * ldd + r];
                    CHECK(fabs(got - exact) <= bound + 1e-4, "rows %zu k %zu col %zu row %zu: %g vs float %g", rows, k,
                          c, r, got, exact);
                    n_bad += memcmp(&got, &ref[c * rows + r], 4) != 0;
                }
                for (size_t r = rows; r < ldd; r++) {
                    CHECK(memcmp(&dp[c * ldd + r], &SENTINEL, 4) == 0, "padding of dst column written");
                }
            }
            free(y);
            free(ref);
        }
    }
    CHECK(n_bad == 0, "%s: rows %zu k %zu cols %zu x %zu x %zu nth %d: %zu outputs differ from the oracle", g_name,
          rows, k, ne11, ne12, ne13, nth, n_bad);

    /* T2P_VERIFY catches an injected one-ulp error in the last output of the last plane. */
    float *  victim = (float *) ((char *) dst + (ne12 - 1) * nb2 + (ne13 - 1) * nb3) + (ne11 - 1) * ldd + rows - 1;
    uint32_t bits;
    memcpy(&bits, victim, 4);
    bits ^= 1;
    memcpy(victim, &bits, 4);
    n_diff = 0;
    for (size_t i = 0; i < nchunk; i++) {
        size_t d = 0;
        t2p_mm_verify(&m, wdata, i, nchunk, &d);
        n_diff += d;
    }
    CHECK(n_diff == 1, "injected difference found %zu times", n_diff);

    free(wdata);
    free(x);
    free(dst);
    free(w);
    free(pq);
}

int main(void) {
    printf("t2p %s, isa %s\n", t2p_version(), t2p_isa_name(t2p_active_isa()));

    /* what the buffer type must refuse, and the verify buffer it must not assume */
    t2p_mm m;
    float  dummy[64] = { 0 };
    CHECK(t2p_mm_init(&m, T2P_TYPE_PQ2_0, T2P_ACT_Q8_0, dummy, sizeof dummy, 8, 200, dummy, 1, 1, 1, 800, 800, 800, dummy, 32, 32, 32,
                      NULL, 0) == T2P_STATUS_INVALID_SHAPE,
          "k %% 128");
    CHECK(t2p_mm_init(&m, T2P_TYPE_PQ2_0, 7, dummy, sizeof dummy, 8, 256, dummy, 1, 1, 1, 1024, 1024, 1024, dummy, 32, 32, 32, NULL, 0) ==
              T2P_STATUS_INVALID_ARGUMENT,
          "unknown activation type");
    CHECK(t2p_mm_init(&m, T2P_TYPE_PQ2_0, T2P_ACT_Q8_0, dummy, sizeof dummy, 8, 256, dummy, 0, 1, 1, 1024, 1024, 1024, dummy, 32, 32, 32,
                      NULL, 0) == T2P_STATUS_INVALID_SHAPE,
          "no columns");
    CHECK(t2p_mm_init(&m, T2P_TYPE_PQ2_0, T2P_ACT_Q8_0, dummy, sizeof dummy, 8, 256, dummy, 1, 1, 1, 1023, 1023, 1023, dummy, 32, 32, 32,
                      NULL, 0) == T2P_STATUS_INVALID_SHAPE,
          "src1 stride not in floats");
    CHECK(t2p_mm_init(&m, T2P_TYPE_PQ2_0, T2P_ACT_Q8_0, dummy, sizeof dummy, 8, 256, dummy, 1, 1, 1, 1024, 1024, 1024, dummy, 32, 32, 32,
                      NULL, 0) == T2P_STATUS_OK &&
              t2p_mm_work_size(&m) == m.plan.work_bytes,
          "work size without verify");
    {
        size_t d = 0;
        CHECK(t2p_mm_verify(&m, dummy, 0, 1, &d) == T2P_STATUS_INVALID_ARGUMENT, "verify needs the verify buffer");
    }

    static const uint32_t         acts[]  = { T2P_ACT_Q8_K, T2P_ACT_Q8_0, T2P_ACT_Q8_0 };
    static const T2pQ8_0FromFloat hooks[] = { NULL, NULL, ggml_model_quantize_q8_0 };
    static const char * const     names[] = { "q8_K", "q8_0 (t2p's quantizer)", "q8_0 (ggml-style from_float)" };
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
                run_case(13, 384, cols[ci], 1, 1, 0, 0, 0, 0, nths[ti]); /* padded rows, q8_0 forced */
            }
        }
        run_case(16, 256, 3, 2, 3, 0, 0, 0, 0, 2);  /* contiguous planes: merged into one batch */
        run_case(16, 256, 3, 2, 3, 8, 4, 0, 0, 3);  /* padded columns, planes still back to back: merged */
        run_case(16, 256, 3, 2, 3, 8, 4, 1, 2, 3);  /* strided planes, padded columns */
        run_case(16, 256, 2, 3, 1, 0, 0, 0, 1, 2);  /* src1 contiguous, dst planes strided: no merge */
        run_case(16, 256, 2, 1, 3, 0, 0, 1, 0, 2);  /* dst contiguous, src1 planes strided: no merge */
        run_case(6, 640, 2, 3, 1, 0, 0, 1, 1, 3);   /* padded rows, k = 640, strided planes */
        run_case(8, 768, 1, 3, 2, 0, 0, 2, 1, 2);   /* single-column planes, strided */
        run_case(8, 768, 1, 3, 2, 0, 0, 0, 0, 2);   /* single-column planes, merged into a batch */
        run_case(4, 256, 1, 1, 1, 0, 0, 0, 0, 2);   /* one row group, two threads */
        run_case(1, 128, 3, 1, 1, 0, 0, 0, 0, 2);   /* one row */
        run_case(8, 4608, 3, 1, 1, 0, 0, 0, 0, 2);  /* q8_0: more quads per column than one from_float call */
        run_case(256, 4096, 2, 1, 1, 0, 0, 0, 0, 3); /* large enough to be split into chunks */
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
