/* C unit tests of the t2p ABI (0.2): every entry point. The matmul plan (init, quantize shares,
 * chunk rows, compute) is checked bit for bit on every ISA path this CPU has against the scalar
 * oracle (the ISA argument T2P_ISA_SCALAR), and the oracle itself against a small C reference
 * written here from the layout definitions (q8_K: one column, whose work buffer is documented
 * ggml block_q8_K; q8_0: through a C model of ggml's quantize_row_q8_0 given as from_float).
 * Shapes: rows 4, 6, 12, 13 (padded last row group), k 256, 384, 640, 1024 (q8_0 forced when
 * k % 256 != 0), 1..9 columns, strided activations and outputs. Then repack / unpack for every
 * source format, the stock vec_dot, and every error status. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <malloc.h> /* _aligned_malloc */
#endif

#include "half.h"
#include "t2p.h"

static int failures = 0, checks = 0;
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        checks++;                                                              \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            failures++;                                                        \
        }                                                                      \
    } while (0)
#define CHECK_STATUS(call, want)                                              \
    do {                                                                      \
        T2pStatus got_ = (call);                                              \
        CHECK(got_ == (want), "status %u (%s), expected %u", (unsigned) got_, \
              t2p_status_string(got_), (unsigned) (want));                    \
    } while (0)

static uint64_t rng_state = 0x12345678;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t) (rng_state >> 33);
}

/* 64-byte aligned, never NULL; freed with xfree. C11 aligned_alloc, or _aligned_malloc on
 * Windows, whose C runtimes (msvcrt, ucrt) have no aligned_alloc. */
static void *xalloc(size_t n) {
    size_t bytes = (n + 63) / 64 * 64 + 64;
#ifdef _WIN32
    void *p = _aligned_malloc(bytes, 64);
#else
    void *p = aligned_alloc(64, bytes);
#endif
    if (!p) abort();
    return p;
}
static void xfree(void *p) {
#ifdef _WIN32
    _aligned_free(p);
#else
    free(p);
#endif
}

/* pq2_0 block (34 bytes): d (fp16) then 32 code bytes; weight j: (qs[j/4] >> 2*(j%4)) & 3. */
static int pq_code(const uint8_t *block, int j) { return (block[2 + j / 4] >> (2 * (j % 4))) & 3; }
static uint16_t pq_d(const uint8_t *block) { return (uint16_t) (block[0] | (block[1] << 8)); }

/* ggml block_q8_K, from its definition: { float d; int8 qs[256]; int16 bsums[16]; }. */
typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} ggml_q8_K;

/* ggml block_q8_0, from its definition: { fp16 d; int8 qs[32]; }, 34 bytes. */
typedef struct {
    uint16_t d;
    int8_t qs[32];
} ggml_q8_0;

/* C model of ggml's x86 (AVX/AVX2) quantize_row_q8_0, with ggml's from_float signature: per 32
 * values d = fp16(amax / 127), q = round-half-even(x * (127 / amax)), saturated to int8. */
static int model_calls = 0;
static void model_quantize_q8_0(const float *x, void *vy, int64_t k) {
    ggml_q8_0 *y = vy;
    model_calls++;
    for (int64_t b = 0; b < k / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
        y[b].d = float_to_half(amax / 127.f);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int i = 0; i < 32; i++) {
            float q = nearbyintf(x[32 * b + i] * id); /* default rounding mode: ties to even */
            y[b].qs[i] = (int8_t) (q > 127.f ? 127 : q < -128.f ? -128 : (int) q);
        }
    }
}

/* A from_float that no quantizer is: -128 / +127 everywhere, the largest, smallest and a
 * negative fp16 scale, to reach the kernels' extremes. Each block's choice depends on its first
 * value only (t2p calls from_float on pieces of any length). */
static void extreme_q8_0(const float *x, void *vy, int64_t k) {
    ggml_q8_0 *y = vy;
    for (int64_t b = 0; b < k / 32; b++) {
        uint32_t u;
        memcpy(&u, &x[32 * b], 4);
        u = (u ^ (u >> 13)) * 0x9E3779B1u;
        y[b].d = (u >> 28) % 3 == 0 ? 0x7BFF : (u >> 28) % 3 == 1 ? 0x0001 : 0xBC00; /* 65504, 2^-24, -1 */
        for (int i = 0; i < 32; i++) y[b].qs[i] = (int8_t) ((u >> 20) % 2 ? 127 : -128);
    }
}

/* Reference: row r of a pq2_0 matrix dotted with a q8_K column, float order of the library. */
static float ref_dot_q8_K(const uint8_t *w, size_t k, size_t r, const ggml_q8_K *y) {
    size_t nb = k / 128;
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (r * nb + b) * 34;
        const ggml_q8_K *yb = &y[b / 2];
        int32_t isum = 0;
        for (int j = 0; j < 128; j++) isum += (pq_code(blk, j) - 1) * yb->qs[128 * (b % 2) + j];
        acc = acc + (half_to_float(pq_d(blk)) * yb->d) * (float) isum;
    }
    return acc;
}

/* Reference: row r dotted with ggml q8_0 blocks (k / 32 of them), in the float order of ggml's
 * vec_dot_pq2_0_q8_0: acc + d_w * (((d0*i0 + d1*i1) + d2*i2) + d3*i3). */
static float ref_dot_q8_0(const uint8_t *w, size_t k, size_t r, const ggml_q8_0 *y) {
    size_t nb = k / 128;
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (r * nb + b) * 34;
        float s = 0.0f;
        for (int j = 0; j < 4; j++) {
            const ggml_q8_0 *q = &y[4 * b + (size_t) j];
            int32_t isum = 0;
            for (int i = 0; i < 32; i++) isum += (pq_code(blk, 32 * j + i) - 1) * q->qs[i];
            float t = half_to_float(q->d) * (float) isum;
            s = j == 0 ? t : s + t;
        }
        acc = acc + half_to_float(pq_d(blk)) * s;
    }
    return acc;
}

static uint8_t *random_pq2_0(size_t rows, size_t k) {
    size_t n = rows * k / 128;
    uint8_t *w = xalloc(n * 34);
    static const uint16_t scales[] = {0, 0x3800, 0xB400, 0x3C00, 0x2200, 0x4300}; /* 0, .5, -.25, 1, ~.0117, 3.5 */
    for (size_t b = 0; b < n; b++) {
        uint8_t *blk = w + b * 34;
        uint16_t h = scales[rnd() % 6];
        blk[0] = (uint8_t) h;
        blk[1] = (uint8_t) (h >> 8);
        for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t) rnd(); /* all four codes, 3 included */
    }
    return w;
}

static void random_floats(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = ((float) (rnd() % 20001) - 10000.0f) / 977.0f;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static int is_supported_isa(uint32_t isa) { return t2p_isa_supported(isa) && t2p_isa_name(isa) != NULL; }

static void test_version_and_isa(void) {
    CHECK(t2p_version() != NULL && strlen(t2p_version()) >= 5, "version string");
    unsigned maj, min, pat;
    CHECK(sscanf(t2p_version(), "%u.%u.%u", &maj, &min, &pat) == 3, "version format");
    CHECK(t2p_version_number() == maj * 10000 + min * 100 + pat, "version number");
    CHECK(t2p_version_number() >= 200, "the plan ABI is 0.2: %u", (unsigned) t2p_version_number());
    uint32_t active = t2p_active_isa();
    CHECK(t2p_isa_supported(active), "active ISA supported");
    CHECK(t2p_isa_name(active) != NULL, "active ISA name");
    CHECK(t2p_isa_name(99) == NULL && t2p_isa_name(T2P_ISA_ACTIVE) == NULL, "unknown ISA name is NULL");
    CHECK(!t2p_isa_supported(99) && !t2p_isa_supported(T2P_ISA_ACTIVE), "unknown ISA unsupported");
    CHECK(t2p_isa_supported(T2P_ISA_SCALAR), "scalar always supported");
    CHECK_STATUS(t2p_set_isa(99), T2P_STATUS_INVALID_ARGUMENT);
#if defined(__x86_64__)
    CHECK_STATUS(t2p_set_isa(T2P_ISA_NEON_I8MM), T2P_STATUS_UNSUPPORTED_ISA);
    CHECK(t2p_cpu_features() & T2P_CPU_AVX2, "x86_64 baseline: AVX2");
#else
    CHECK_STATUS(t2p_set_isa(T2P_ISA_AVX2), T2P_STATUS_UNSUPPORTED_ISA);
    CHECK(t2p_cpu_features() & T2P_CPU_NEON, "aarch64: NEON");
#endif
    CHECK(t2p_active_isa() == active, "failed set_isa leaves the path unchanged");
    for (uint32_t s = 0; s < 9; s++) CHECK(t2p_status_string(s) != NULL, "status string %u", s);
    CHECK(strcmp(t2p_status_string(0), "ok") == 0, "status 0 is ok");
    printf("t2p %s, cpu features 0x%x, active path %s, paths:", t2p_version(), t2p_cpu_features(),
           t2p_isa_name(active));
    for (uint32_t isa = 0; isa < 16; isa++)
        if (is_supported_isa(isa)) printf(" %s", t2p_isa_name(isa));
    printf("\n");
}

/* The T2P bytes against the layout definition, byte by byte; padded rows are code 1, scale 0. */
static void check_t2p_layout(const uint8_t *pq, const uint8_t *t2p, size_t rows, size_t k) {
    size_t nb = k / 128;
    int bad = 0;
    for (size_t g = 0; g < (rows + 3) / 4; g++) {
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = t2p + (g * nb + b) * 136;
            for (int r = 0; r < 4; r++) {
                const uint8_t *src = 4 * g + r < rows ? pq + ((4 * g + r) * nb + b) * 34 : NULL;
                bad += blk[2 * r] != (src ? src[0] : 0) || blk[2 * r + 1] != (src ? src[1] : 0);
            }
            for (int p = 0; p < 2; p++)
                for (int wd = 0; wd < 4; wd++)
                    for (int j = 0; j < 16; j++) {
                        size_t r = 4 * g + 2 * (size_t) p + (j >= 8);
                        for (int s = 0; s < 4; s++) {
                            int kk = 8 * (4 * wd + s) + (j & 7);
                            int u = (blk[8 + 64 * p + 16 * wd + j] >> (2 * s)) & 3;
                            bad += u != (r < rows ? pq_code(pq + (r * nb + b) * 34, kk) : 1);
                        }
                    }
        }
    }
    CHECK(bad == 0, "%zux%zu: %d mismatches with the T2P layout definition", rows, k, bad);
}

static void test_repack(size_t rows, size_t k) {
    size_t bytes = 0, src = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    CHECK(bytes == (rows + 3) / 4 * (k / 128) * 136, "%zux%zu: T2P size %zu", rows, k, bytes);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_PQ2_0, rows, k, &src), T2P_STATUS_OK);
    CHECK(src == rows * k / 128 * 34, "pq2_0 size %zu", src);
    uint8_t *pq = random_pq2_0(rows, k), *t = xalloc(bytes), *back = xalloc(bytes);
    memset(t, 0xCD, bytes);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, src, t, bytes, rows, k), T2P_STATUS_OK);
    check_t2p_layout(pq, t, rows, k);
    memset(back, 0xCD, bytes + 1);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, t, bytes, back, src, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(back, pq, src) == 0, "unpack round trip");
    CHECK(back[src] == 0xCD, "unpack writes only the source size");
    /* In place (a buffer of the T2P size, the pq2_0 bytes at its start) equals out of place. */
    memcpy(back, pq, src);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, back, bytes, back, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(back, t, bytes) == 0, "in-place repack");
    memcpy(back, pq, src);
    CHECK_STATUS(t2p_repack(T2P_TYPE_Q2_0_G128, back, bytes, back, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(back, t, bytes) == 0, "in-place repack of legacy Q2_0 g128");
    xfree(pq);
    xfree(t);
    xfree(back);
}

/* One matrix, one activation type, every column count: see the file comment. `from_float` is
 * NULL (t2p's q8_0 quantizer), model_quantize_q8_0 or extreme_q8_0 (q8_0 plans only). */
static void test_plan(size_t rows, size_t k, uint32_t act, T2pQ8_0FromFloat from_float, const char *what) {
    size_t bytes = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    uint8_t *pq = random_pq2_0(rows, k), *w = xalloc(bytes);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, rows * k / 128 * 34, w, bytes, rows, k), T2P_STATUS_OK);
    const uint32_t want_act = k % 256 ? T2P_ACT_Q8_0 : act;
    int bad_total = 0;
    /* Nine columns, the same for every column count: column 1 extremes, column 2 zero, column 0
     * an all-zero block. Column c alone through a one-column plan gives single[c * rows + r]. */
    const size_t ld_x = k + 3, x_all = 8 * ld_x + k;
    float *x = xalloc(sizeof(float) * x_all), *single = xalloc(sizeof(float) * rows * 9);
    random_floats(x, x_all);
    for (size_t i = 0; i < k; i++) x[ld_x + i] = (i % 2) ? 60000.0f : -59999.0f;
    memset(x + 2 * ld_x, 0, sizeof(float) * k);
    memset(x, 0, sizeof(float) * 32);
    {
        T2pPlan one;
        CHECK_STATUS(t2p_plan_init(&one, act, rows, k, 1), T2P_STATUS_OK);
        uint8_t *work = xalloc(one.work_bytes);
        int bad = 0;
        for (size_t c = 0; c < 9; c++) {
            CHECK_STATUS(t2p_plan_quantize(&one, x + c * ld_x, k, k, from_float, work, one.work_bytes, 0, 1), T2P_STATUS_OK);
            CHECK_STATUS(t2p_plan_compute(&one, T2P_ISA_SCALAR, w, bytes, work, one.work_bytes, single + c * rows, rows,
                                          rows, 0, rows),
                         T2P_STATUS_OK);
            if (one.act != T2P_ACT_Q8_K) continue;
            /* q8_K, one column: the work buffer is plain ggml block_q8_K; C reference and stock vec_dot. */
            const ggml_q8_K *y = (const ggml_q8_K *) work;
            CHECK(one.work_bytes == k / 256 * sizeof(ggml_q8_K) && sizeof(ggml_q8_K) == T2P_Q8_K_BLOCK_BYTES,
                  "one q8_K column is plain block_q8_K");
            for (size_t b = 0; b < k / 256; b++)
                for (int i = 0; i < 16; i++) {
                    int sum = 0;
                    for (int j = 0; j < 16; j++) sum += y[b].qs[16 * i + j];
                    bad += sum != y[b].bsums[i];
                }
            for (size_t r = 0; r < rows; r++) {
                float v = 0.0f;
                bad += !same_bits(single[c * rows + r], ref_dot_q8_K(pq, k, r, y));
                t2p_vec_dot_pq2_0_q8_K((int) k, &v, 0, pq + r * (k / 128) * 34, 0, y, 0, 1);
                bad += !same_bits(v, single[c * rows + r]);
            }
        }
        CHECK(bad == 0, "%s %zux%zu: %d one-column q8_K oracle outputs differ from the C reference", what, rows, k, bad);
        xfree(work);
    }

    for (size_t ncols = 1; ncols <= 9; ncols++) {
        T2pPlan plan;
        CHECK_STATUS(t2p_plan_init(&plan, act, rows, k, ncols), T2P_STATUS_OK);
        CHECK(plan.act == want_act && plan.rows == rows && plan.k == k && plan.ncols == ncols && plan.work_bytes > 0 &&
                  plan.work_bytes % 4 == 0,
              "%s plan %zux%zu x %zu: act %u work %zu", what, rows, k, ncols, plan.act, plan.work_bytes);
        const size_t x_len = (ncols - 1) * ld_x + k;

        /* Shares: 3 threads in reverse order equal one thread, and cover the whole buffer. */
        uint8_t *work = xalloc(plan.work_bytes), *work1 = xalloc(plan.work_bytes);
        memset(work, 0xA5, plan.work_bytes);
        memset(work1, 0x5A, plan.work_bytes);
        for (uint32_t ith = 3; ith-- > 0;)
            CHECK_STATUS(t2p_plan_quantize(&plan, x, ld_x, x_len, from_float, work, plan.work_bytes, ith, 3), T2P_STATUS_OK);
        CHECK_STATUS(t2p_plan_quantize(&plan, x, ld_x, x_len, from_float, work1, plan.work_bytes, 0, 1), T2P_STATUS_OK);
        CHECK(memcmp(work, work1, plan.work_bytes) == 0, "%s %zu cols: 3 shares differ from 1", what, ncols);
        /* Many more shares than units: some are empty, the result is the same. */
        memset(work1, 0x5A, plan.work_bytes);
        for (uint32_t ith = 0; ith < 1000; ith++)
            CHECK_STATUS(t2p_plan_quantize(&plan, x, ld_x, x_len, from_float, work1, plan.work_bytes, ith, 1000),
                         T2P_STATUS_OK);
        CHECK(memcmp(work, work1, plan.work_bytes) == 0, "%s %zu cols: 1000 shares differ from 3", what, ncols);
        if (plan.act == T2P_ACT_Q8_0 && from_float == model_quantize_q8_0) {
            /* t2p's own quantizer has ggml's x86 rounding: the same work buffer. */
            CHECK_STATUS(t2p_plan_quantize(&plan, x, ld_x, x_len, NULL, work1, plan.work_bytes, 0, 1), T2P_STATUS_OK);
            CHECK(memcmp(work, work1, plan.work_bytes) == 0, "%zu cols: t2p's q8_0 differs from ggml's rounding", ncols);
        }

        /* The oracle, one call over all rows, against the C reference. */
        const size_t ld = rows + 2, out_len = (ncols - 1) * ld + rows;
        float *ref = xalloc(sizeof(float) * ld * ncols), *out = xalloc(sizeof(float) * ld * ncols);
        CHECK_STATUS(t2p_plan_compute(&plan, T2P_ISA_SCALAR, w, bytes, work, plan.work_bytes, ref, ld, out_len, 0, rows),
                     T2P_STATUS_OK);
        int bad = 0;
        if (plan.act == T2P_ACT_Q8_0 && from_float != NULL) {
            ggml_q8_0 *g = xalloc(sizeof(ggml_q8_0) * k / 32);
            for (size_t c = 0; c < ncols; c++) {
                from_float(x + c * ld_x, g, (int64_t) k);
                for (size_t r = 0; r < rows; r++) bad += !same_bits(ref[c * ld + r], ref_dot_q8_0(pq, k, r, g));
            }
            xfree(g);
        }
        /* Every column equals the same column computed alone (C-checked above for q8_K). */
        for (size_t c = 0; c < ncols; c++)
            for (size_t r = 0; r < rows; r++) bad += !same_bits(ref[c * ld + r], single[c * rows + r]);
        CHECK(bad == 0, "%s %zux%zu x %zu cols: %d oracle outputs differ from the C reference", what, rows, k, ncols,
              bad);

        /* Every path, in chunks taken out of order (as threads would), equals the oracle. */
        for (uint32_t isa = 0; isa < 16; isa++) {
            if (!is_supported_isa(isa)) continue;
            for (size_t nth = 1; nth <= 3; nth += 2) {
                size_t n = 0;
                CHECK_STATUS(t2p_plan_chunk_count(&plan, nth, &n), T2P_STATUS_OK);
                CHECK(n >= 1, "chunk count");
                if (nth == 3) n = (rows + 3) / 4 + 2; /* more chunks than row groups: some are empty */
                for (size_t i = 0; i < ld * ncols; i++) out[i] = -7.0f;
                size_t covered = 0;
                for (size_t j = 0; j < n; j++) {
                    size_t i = (j * 5 + 3) % n, b = 99, e = 99;
                    if (n % 5 == 0) i = n - 1 - j;
                    CHECK_STATUS(t2p_plan_chunk_rows(&plan, i, n, &b, &e), T2P_STATUS_OK);
                    CHECK(b <= e && e <= rows && b % 4 == 0 && (e % 4 == 0 || e == rows), "chunk %zu: %zu..%zu", i, b, e);
                    covered += e - b;
                    CHECK_STATUS(t2p_plan_compute(&plan, isa, w, bytes, work, plan.work_bytes, out, ld, out_len, b, e),
                                 T2P_STATUS_OK);
                }
                CHECK(covered == rows, "chunks cover %zu of %zu rows", covered, rows);
                bad = 0;
                for (size_t c = 0; c < ncols; c++) {
                    for (size_t r = 0; r < rows; r++) bad += !same_bits(out[c * ld + r], ref[c * ld + r]);
                    for (size_t r = rows; r < ld && c + 1 < ncols; r++) bad += out[c * ld + r] != -7.0f;
                }
                bad_total += bad;
                CHECK(bad == 0, "%s %s %zux%zu x %zu cols, %zu chunks: %d outputs differ from the oracle", what,
                      t2p_isa_name(isa), rows, k, ncols, n, bad);
            }
            /* T2P_ISA_ACTIVE follows t2p_set_isa. */
            CHECK_STATUS(t2p_set_isa(isa), T2P_STATUS_OK);
            for (size_t i = 0; i < ld * ncols; i++) out[i] = -7.0f;
            CHECK_STATUS(t2p_plan_compute(&plan, T2P_ISA_ACTIVE, w, bytes, work, plan.work_bytes, out, ld, out_len, 0,
                                          rows),
                         T2P_STATUS_OK);
            bad = 0;
            for (size_t c = 0; c < ncols; c++)
                for (size_t r = 0; r < rows; r++) bad += !same_bits(out[c * ld + r], ref[c * ld + r]);
            CHECK(bad == 0, "%s active path %s: %d outputs differ", what, t2p_isa_name(isa), bad);
        }
        xfree(work);
        xfree(work1);
        xfree(ref);
        xfree(out);
    }
    xfree(x);
    /* The comparisons can fail: flip one weight code and the oracle's row 0 moves. */
    {
        T2pPlan plan;
        CHECK_STATUS(t2p_plan_init(&plan, act, rows, k, 1), T2P_STATUS_OK);
        float *x1 = xalloc(sizeof(float) * k), a = 0.0f, b = 0.0f;
        for (size_t i = 0; i < k; i++) x1[i] = 1.0f;
        uint8_t *work = xalloc(plan.work_bytes);
        CHECK_STATUS(t2p_plan_quantize(&plan, x1, k, k, from_float, work, plan.work_bytes, 0, 1), T2P_STATUS_OK);
        w[0] = 0x00; /* row 0 scale: 1.0 */
        w[1] = 0x3C;
        float o4[4];
        CHECK_STATUS(t2p_plan_compute(&plan, T2P_ISA_SCALAR, w, bytes, work, plan.work_bytes, o4, 4, 4, 0, 4), T2P_STATUS_OK);
        a = o4[0];
        w[8] ^= 0x01; /* row 0, one code */
        CHECK_STATUS(t2p_plan_compute(&plan, T2P_ISA_SCALAR, w, bytes, work, plan.work_bytes, o4, 4, 4, 0, 4), T2P_STATUS_OK);
        b = o4[0];
        CHECK(!same_bits(a, b), "a changed weight must change the output (%g)", a);
        xfree(x1);
        xfree(work);
    }
    CHECK_STATUS(t2p_set_isa(T2P_ISA_SCALAR), T2P_STATUS_OK);
    printf("  plan %-22s %2zu x %4zu, 1..9 columns: %s\n", what, rows, k, bad_total ? "FAILED" : "bit-exact on every path");
    xfree(pq);
    xfree(w);
    xfree(single);
}

/* Every error status of the plan functions; nothing written on error. */
static void test_plan_misuse(void) {
    const size_t rows = 8, k = 256, ncols = 5;
    T2pPlan plan;
    CHECK_STATUS(t2p_plan_init(NULL, T2P_ACT_Q8_0, rows, k, ncols), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_plan_init(&plan, 7, rows, k, ncols), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_plan_init(&plan, T2P_ACT_Q8_0, 0, k, ncols), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_plan_init(&plan, T2P_ACT_Q8_0, rows, 0, ncols), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_plan_init(&plan, T2P_ACT_Q8_0, rows, 200, ncols), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_plan_init(&plan, T2P_ACT_Q8_0, rows, k, 0), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_plan_init(&plan, T2P_ACT_Q8_K, rows, k, SIZE_MAX / 2), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_plan_init(&plan, T2P_ACT_Q8_0, SIZE_MAX / 2, k, ncols), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_plan_init(&plan, T2P_ACT_Q8_K, rows, 384, ncols), T2P_STATUS_OK);
    CHECK(plan.act == T2P_ACT_Q8_0, "k = 384 forces q8_0");
    CHECK_STATUS(t2p_plan_init(&plan, T2P_ACT_Q8_K, rows, k, ncols), T2P_STATUS_OK);

    /* A plan changed by hand is refused by every function. */
    size_t n = 0, b = 0, e = 0;
    const T2pPlan *bads[6];
    T2pPlan p_act = plan, p_work = plan, p_rows = plan, p_k = plan, p_cols = plan, p_act2;
    p_act.act = 9;
    p_work.work_bytes += 4;
    p_rows.rows = 0;
    p_k.k = 200;
    p_cols.ncols = 6; /* work_bytes no longer matches */
    CHECK_STATUS(t2p_plan_init(&p_act2, T2P_ACT_Q8_0, rows, 384, 1), T2P_STATUS_OK);
    p_act2.act = T2P_ACT_Q8_K; /* q8_K cannot hold k = 384 */
    bads[0] = &p_act, bads[1] = &p_work, bads[2] = &p_rows, bads[3] = &p_k, bads[4] = &p_cols, bads[5] = &p_act2;
    for (int i = 0; i < 6; i++) {
        T2pStatus s = t2p_plan_chunk_count(bads[i], 2, &n);
        CHECK(s == T2P_STATUS_INVALID_ARGUMENT || s == T2P_STATUS_INVALID_SHAPE, "bad plan %d: chunk_count %u", i, s);
        s = t2p_plan_chunk_rows(bads[i], 0, 1, &b, &e);
        CHECK(s == T2P_STATUS_INVALID_ARGUMENT || s == T2P_STATUS_INVALID_SHAPE, "bad plan %d: chunk_rows %u", i, s);
    }
    CHECK_STATUS(t2p_plan_chunk_count(&p_act, 2, &n), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_plan_chunk_count(&p_work, 2, &n), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_plan_chunk_count(&p_rows, 2, &n), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_plan_chunk_count(&p_k, 2, &n), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_plan_chunk_count(&p_act2, 2, &n), T2P_STATUS_INVALID_ARGUMENT);

    CHECK_STATUS(t2p_plan_chunk_count(NULL, 2, &n), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_plan_chunk_count(&plan, 2, NULL), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_plan_chunk_count(&plan, 0, &n), T2P_STATUS_OK); /* 0 threads: as 1 */
    CHECK(n == 1, "a small product is one chunk: %zu", n);
    CHECK_STATUS(t2p_plan_chunk_rows(NULL, 0, 1, &b, &e), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_plan_chunk_rows(&plan, 0, 1, NULL, &e), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_plan_chunk_rows(&plan, 0, 1, &b, NULL), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_plan_chunk_rows(&plan, 0, 0, &b, &e), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_plan_chunk_rows(&plan, 3, 3, &b, &e), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_plan_chunk_rows(&plan, 1, 2, &b, &e), T2P_STATUS_OK);
    CHECK(b == 4 && e == 8, "chunk 1 of 2: %zu..%zu", b, e);
    { /* a large product is split: several chunks per thread, at most one per row group */
        T2pPlan big;
        CHECK_STATUS(t2p_plan_init(&big, T2P_ACT_Q8_0, 4096, 4096, 1), T2P_STATUS_OK);
        CHECK_STATUS(t2p_plan_chunk_count(&big, 4, &n), T2P_STATUS_OK);
        CHECK(n > 4 && n <= 1024, "4096 x 4096 on 4 threads: %zu chunks", n);
        CHECK_STATUS(t2p_plan_init(&big, T2P_ACT_Q8_0, 6, 1 << 20, 1), T2P_STATUS_OK);
        CHECK_STATUS(t2p_plan_chunk_count(&big, 64, &n), T2P_STATUS_OK);
        CHECK(n <= 2, "6 rows: at most 2 chunks, got %zu", n);
    }

    size_t bytes = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    uint8_t *pq = random_pq2_0(rows, k), *w = xalloc(bytes + 2);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes, w, bytes, rows, k), T2P_STATUS_OK);
    const size_t x_len = ncols * k;
    float *x = xalloc(sizeof(float) * (x_len + 1));
    random_floats(x, x_len + 1);
    uint8_t *work = xalloc(plan.work_bytes + 4);
    memset(work, 0x5A, plan.work_bytes + 4);
#define Q(pl, xx, ldx, xl, wk, wb, i, t) t2p_plan_quantize(pl, xx, ldx, xl, NULL, wk, wb, i, t)
    CHECK_STATUS(Q(NULL, x, k, x_len, work, plan.work_bytes, 0, 1), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(Q(&p_work, x, k, x_len, work, plan.work_bytes, 0, 1), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(Q(&plan, NULL, k, x_len, work, plan.work_bytes, 0, 1), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(Q(&plan, x, k, x_len, NULL, plan.work_bytes, 0, 1), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(Q(&plan, x, k, x_len - 1, work, plan.work_bytes, 0, 1), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(Q(&plan, x, k - 1, x_len, work, plan.work_bytes, 0, 1), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(Q(&plan, x, k, x_len, work, plan.work_bytes - 1, 0, 1), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(Q(&plan, x, k, x_len, work + 2, plan.work_bytes, 0, 1), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(Q(&plan, (const float *) ((const char *) x + 2), k, x_len, work, plan.work_bytes, 0, 1),
                 T2P_STATUS_MISALIGNED);
    CHECK_STATUS(Q(&plan, x, k, x_len, work, plan.work_bytes, 0, 0), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(Q(&plan, x, k, x_len, work, plan.work_bytes, 2, 2), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(Q(&plan, x, k, x_len, work, plan.work_bytes, 7, 3), T2P_STATUS_INVALID_ARGUMENT);
    int untouched = 1;
    for (size_t i = 0; i < plan.work_bytes + 4; i++) untouched &= work[i] == 0x5A;
    CHECK(untouched, "failed quantizations wrote the work buffer");
    CHECK_STATUS(Q(&plan, x, k, x_len, work, plan.work_bytes, 0, 1), T2P_STATUS_OK);
    CHECK(work[plan.work_bytes] == 0x5A, "quantize writes only work_bytes");
#undef Q

    float out[8 * 5 + 1];
    for (int i = 0; i < 41; i++) out[i] = 42.0f;
    const size_t wb = plan.work_bytes;
#define C(pl, isa, ww, wbytes, wk, wkb, o, ld, ol, rb, re) t2p_plan_compute(pl, isa, ww, wbytes, wk, wkb, o, ld, ol, rb, re)
    CHECK_STATUS(C(NULL, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(C(&p_act, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(C(&p_work, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(C(&p_rows, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(C(&plan, 99, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(C(&plan, T2P_ISA_ACTIVE - 1, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_INVALID_ARGUMENT);
#if defined(__x86_64__)
    CHECK_STATUS(C(&plan, T2P_ISA_NEON, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_UNSUPPORTED_ISA);
#else
    CHECK_STATUS(C(&plan, T2P_ISA_AVX2, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_UNSUPPORTED_ISA);
#endif
    for (uint32_t isa = 0; isa < 16; isa++)
        if (t2p_isa_name(isa) != NULL && !t2p_isa_supported(isa))
            CHECK_STATUS(C(&plan, isa, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_UNSUPPORTED_ISA);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, NULL, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes - 1, work, wb, out, 8, 40, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w + 1, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, NULL, wb, out, 8, 40, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb - 1, out, 8, 40, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work + 2, wb, out, 8, 40, 0, 8), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, NULL, 8, 40, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 39, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 7, 40, 0, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, (float *) ((char *) out + 2), 8, 40, 0, 8),
                 T2P_STATUS_MISALIGNED);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 4, 2), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 0, 12), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 2, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 0, 6), T2P_STATUS_INVALID_SHAPE);
    for (int i = 0; i < 41; i++) out[i] = 42.0f;
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 0, 8), T2P_STATUS_OK);
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 4, 4), T2P_STATUS_OK); /* empty range */
    CHECK(out[40] == 42.0f, "compute writes only out_len");
    for (int i = 0; i < 40; i++) out[i] = 42.0f;
    CHECK_STATUS(C(&plan, T2P_ISA_SCALAR, w, bytes, work, wb, out, 8, 40, 4, 8), T2P_STATUS_OK);
    untouched = 1;
    for (int c = 0; c < 5; c++)
        for (int r = 0; r < 4; r++) untouched &= out[8 * c + r] == 42.0f;
    CHECK(untouched, "a row range writes only its rows");
#undef C
    { /* odd rows: the range may end at rows, not inside the padded group */
        T2pPlan odd;
        size_t ob = 0;
        CHECK_STATUS(t2p_plan_init(&odd, T2P_ACT_Q8_0, 6, 128, 1), T2P_STATUS_OK);
        CHECK_STATUS(t2p_repack_size(6, 128, &ob), T2P_STATUS_OK);
        CHECK(ob == 2 * 136, "6 x 128 is 2 T2P blocks: %zu", ob);
        uint8_t *wo = xalloc(ob), *wk = xalloc(odd.work_bytes);
        uint8_t *po = random_pq2_0(6, 128);
        CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, po, 6 * 34, wo, ob, 6, 128), T2P_STATUS_OK);
        CHECK_STATUS(t2p_plan_quantize(&odd, x, 128, 128, NULL, wk, odd.work_bytes, 0, 1), T2P_STATUS_OK);
        float o[8] = {42, 42, 42, 42, 42, 42, 42, 42};
        CHECK_STATUS(t2p_plan_compute(&odd, T2P_ISA_SCALAR, wo, ob, wk, odd.work_bytes, o, 6, 6, 4, 8), T2P_STATUS_INVALID_SHAPE);
        CHECK_STATUS(t2p_plan_compute(&odd, T2P_ISA_SCALAR, wo, ob, wk, odd.work_bytes, o, 6, 5, 0, 6), T2P_STATUS_BUFFER_TOO_SMALL);
        CHECK_STATUS(t2p_plan_compute(&odd, T2P_ISA_SCALAR, wo, ob, wk, odd.work_bytes, o, 6, 6, 0, 6), T2P_STATUS_OK);
        CHECK(o[6] == 42.0f && o[7] == 42.0f, "padded rows are not written");
        xfree(wo);
        xfree(wk);
        xfree(po);
    }
    xfree(pq);
    xfree(w);
    xfree(x);
    xfree(work);
}

/* The stock vec_dot on arguments it must refuse: it writes NaN. */
static void check_vec_dot_refused(int n, const void *x, const void *y, int nrc, const char *what) {
    float s = 0.0f;
    t2p_vec_dot_pq2_0_q8_K(n, &s, 0, x, 0, y, 0, nrc);
    CHECK(isnan(s), "vec_dot with %s gives NaN", what);
}

static void test_repack_misuse(void) {
    const size_t rows = 8, k = 256;
    size_t bytes = 0, sz = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    CHECK_STATUS(t2p_repack_size(0, k, &sz), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_repack_size(rows, 200, &sz), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_repack_size(rows, 0, &sz), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_repack_size(SIZE_MAX, 1 << 20, &sz), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_repack_size(rows, k, NULL), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_TQ2_0, rows, 384, &sz), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_TQ1_0, rows, 128, &sz), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_source_size(77, rows, k, &sz), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_PQ2_0, rows, k, NULL), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_PTQ1_0, 5, 128, &sz), T2P_STATUS_OK);
    CHECK(sz == 5 * 28, "ptq1_0 size %zu", sz);
    uint8_t *pq = random_pq2_0(rows, k), *t = xalloc(bytes + 64), *t_copy = xalloc(bytes);
    memset(t, 0xAB, bytes + 64);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, NULL, bytes, t, bytes, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes, NULL, bytes, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes - 1, t, bytes, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes, t, bytes - 1, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes, t + 1, bytes, rows, k), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq + 1, bytes, t, bytes, rows, k), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes, pq + 34, bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes, t, bytes, rows, 200), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes, t, bytes, 0, k), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_repack(99, pq, bytes, t, bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_repack(T2P_TYPE_TQ2_0, pq, bytes, pq, bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    { /* in place needs the T2P size for padded rows */
        size_t b6 = 0;
        CHECK_STATUS(t2p_repack_size(6, k, &b6), T2P_STATUS_OK);
        CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, t, 6 * 2 * 34, t, 6 * 2 * 34, 6, k), T2P_STATUS_BUFFER_TOO_SMALL);
        CHECK(b6 == 2 * 2 * 136, "6 x 256: %zu", b6);
    }
    int untouched = 1;
    for (size_t i = 0; i < bytes + 64; i++) untouched &= t[i] == 0xAB;
    CHECK(untouched, "failed repacks wrote nothing");
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, bytes, t, bytes, rows, k), T2P_STATUS_OK);
    CHECK(t[bytes] == 0xAB, "repack writes only the T2P size");
    memcpy(t_copy, t, bytes);

    uint8_t *back = xalloc(bytes + 64);
    memset(back, 0xEE, bytes + 64);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, NULL, bytes, back, bytes, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, t, bytes, NULL, bytes, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, t, bytes - 1, back, bytes, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, t, bytes, back, bytes - 1, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, t + 1, bytes, back, bytes, rows, k), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, t, bytes, back + 1, bytes, rows, k), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, t, bytes, t + 2, bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, t, bytes, back, bytes, rows, 200), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_unpack(88, t, bytes, back, bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    untouched = 1;
    for (size_t i = 0; i < bytes + 64; i++) untouched &= back[i] == 0xEE;
    CHECK(untouched, "failed unpacks wrote nothing");
    CHECK(memcmp(t, t_copy, bytes) == 0, "T2P weights untouched");

    ggml_q8_K y[1];
    memset(y, 0, sizeof y);
    check_vec_dot_refused(100, pq, y, 1, "n not a multiple of 256");
    check_vec_dot_refused(0, pq, y, 1, "n = 0");
    check_vec_dot_refused(256, NULL, y, 1, "NULL x");
    check_vec_dot_refused(256, pq, NULL, 1, "NULL y");
    check_vec_dot_refused(256, pq, (const char *) y + 1, 1, "misaligned y");
    check_vec_dot_refused(256, pq, y, 2, "nrc = 2");
    t2p_vec_dot_pq2_0_q8_K(256, NULL, 0, pq, 0, y, 0, 1); /* must not crash */
    float s = NAN; /* a call that wrote nothing fails the check */
    t2p_vec_dot_pq2_0_q8_K(256, &s, 0, pq, 0, y, 0, 1);
    CHECK(s == 0.0f, "vec_dot with a zero q8_K block: %g", s);
    xfree(pq);
    xfree(t);
    xfree(t_copy);
    xfree(back);
}

/* The same ternary weights (one scale per 256) as pq2_0, tq2_0 and tq1_0 give the same T2P bytes,
 * and back. */
static uint8_t pack5(const int *t, int n) { /* n trits, first one most significant, as tq1_0 */
    unsigned q = 0;
    for (int i = 0; i < n; i++) q = q * 3 + (unsigned) t[i];
    for (int i = n; i < 5; i++) q *= 3;
    return (uint8_t) ((q * 256 + 242) / 243);
}

static void test_other_formats(size_t rows) {
    const size_t k = 512, nb256 = k / 256;
    size_t bytes = 0, tq2 = 0, tq1 = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_TQ2_0, rows, k, &tq2), T2P_STATUS_OK);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_TQ1_0, rows, k, &tq1), T2P_STATUS_OK);
    CHECK(tq2 == rows * nb256 * 66 && tq1 == rows * nb256 * 54, "source sizes %zu %zu", tq2, tq1);
    const size_t pqb = rows * k / 128 * 34;
    uint8_t *pq = xalloc(pqb), *b2 = xalloc(tq2), *b1 = xalloc(tq1);
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < nb256; i++) {
            int code[256];
            uint16_t d = (uint16_t) (0x3000 + rnd() % 0x1000);
            for (int e = 0; e < 256; e++) code[e] = (int) (rnd() % 3);
            for (int h = 0; h < 2; h++) { /* pq2_0: two blocks of 128 with the same scale */
                uint8_t *blk = pq + ((r * nb256 + i) * 2 + (size_t) h) * 34;
                blk[0] = (uint8_t) d;
                blk[1] = (uint8_t) (d >> 8);
                for (int j = 0; j < 32; j++)
                    blk[2 + j] = (uint8_t) (code[128 * h + 4 * j] | code[128 * h + 4 * j + 1] << 2 |
                                            code[128 * h + 4 * j + 2] << 4 | code[128 * h + 4 * j + 3] << 6);
            }
            uint8_t *q2 = b2 + (r * nb256 + i) * 66; /* tq2_0 { qs[64]; fp16 d }: byte 32h+m holds 128h+m+32l */
            for (int j = 0; j < 64; j++) {
                int h = j / 32, m = j % 32;
                q2[j] = (uint8_t) (code[128 * h + m] | code[128 * h + m + 32] << 2 | code[128 * h + m + 64] << 4 |
                                   code[128 * h + m + 96] << 6);
            }
            q2[64] = (uint8_t) d;
            q2[65] = (uint8_t) (d >> 8);
            uint8_t *q1 = b1 + (r * nb256 + i) * 54; /* tq1_0 { qs[48]; qh[4]; fp16 d }, ggml's order */
            for (int m = 0; m < 32; m++) {
                int t[5] = {code[m], code[32 + m], code[64 + m], code[96 + m], code[128 + m]};
                q1[m] = pack5(t, 5);
            }
            for (int m = 0; m < 16; m++) {
                int t[5] = {code[160 + m], code[176 + m], code[192 + m], code[208 + m], code[224 + m]};
                q1[32 + m] = pack5(t, 5);
            }
            for (int j = 0; j < 4; j++) {
                int t[4] = {code[240 + j], code[244 + j], code[248 + j], code[252 + j]};
                q1[48 + j] = pack5(t, 4);
            }
            q1[52] = (uint8_t) d;
            q1[53] = (uint8_t) (d >> 8);
        }
    uint8_t *want = xalloc(bytes), *got = xalloc(bytes);
    CHECK_STATUS(t2p_repack(T2P_TYPE_PQ2_0, pq, pqb, want, bytes, rows, k), T2P_STATUS_OK);
    memset(got, 0, bytes);
    CHECK_STATUS(t2p_repack(T2P_TYPE_TQ2_0, b2, tq2, got, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(got, want, bytes) == 0, "%zu rows: tq2_0 -> T2P equals pq2_0 -> T2P", rows);
    memset(got, 0, bytes);
    CHECK_STATUS(t2p_repack(T2P_TYPE_TQ1_0, b1, tq1, got, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(got, want, bytes) == 0, "%zu rows: tq1_0 -> T2P equals pq2_0 -> T2P", rows);
    memset(got, 0, bytes);
    CHECK_STATUS(t2p_repack(T2P_TYPE_Q2_0_G128, pq, pqb, got, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(got, want, bytes) == 0, "legacy Q2_0 g128 -> T2P equals pq2_0 -> T2P");
    CHECK_STATUS(t2p_repack(T2P_TYPE_TQ1_0, b1, tq1 - 1, got, bytes, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack(T2P_TYPE_TQ1_0, b1, tq1, got, bytes - 1, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack(T2P_TYPE_TQ2_0, b2, tq2, got, bytes, rows, 384), T2P_STATUS_INVALID_SHAPE);

    /* ... and back: every source format's original bytes (tq1_0 bytes here are canonical). */
    uint8_t *src_back = xalloc(tq2 > bytes ? tq2 : bytes);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_TQ2_0, want, bytes, src_back, tq2, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(src_back, b2, tq2) == 0, "T2P -> tq2_0 gives the original bytes");
    CHECK_STATUS(t2p_unpack(T2P_TYPE_TQ1_0, want, bytes, src_back, tq1, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(src_back, b1, tq1) == 0, "T2P -> tq1_0 gives the original bytes");
    CHECK_STATUS(t2p_unpack(T2P_TYPE_PQ2_0, want, bytes, src_back, pqb, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(src_back, pq, pqb) == 0, "T2P -> pq2_0 gives the original bytes");
    CHECK_STATUS(t2p_unpack(T2P_TYPE_Q2_0_G128, want, bytes, src_back, pqb, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(src_back, pq, pqb) == 0, "T2P -> legacy Q2_0 g128 gives the original bytes");
    {
        size_t ptq = 0;
        CHECK_STATUS(t2p_source_size(T2P_TYPE_PTQ1_0, rows, k, &ptq), T2P_STATUS_OK);
        uint8_t *p1 = xalloc(ptq), *again = xalloc(bytes);
        CHECK_STATUS(t2p_unpack(T2P_TYPE_PTQ1_0, want, bytes, p1, ptq, rows, k), T2P_STATUS_OK);
        CHECK_STATUS(t2p_repack(T2P_TYPE_PTQ1_0, p1, ptq, again, bytes, rows, k), T2P_STATUS_OK);
        CHECK(memcmp(again, want, bytes) == 0, "T2P -> ptq1_0 -> T2P round trip");
        xfree(p1);
        xfree(again);
    }
    /* What a format cannot hold: nothing written. */
    memset(src_back, 0xEE, tq2);
    {
        uint8_t *odd = xalloc(bytes);
        memcpy(odd, want, bytes);
        odd[2] ^= 0x01; /* row 1 of the first T2P block: another scale than its 256-block partner */
        CHECK_STATUS(t2p_unpack(T2P_TYPE_TQ2_0, odd, bytes, src_back, tq2, rows, k), T2P_STATUS_INVALID_ARGUMENT);
        memcpy(odd, want, bytes);
        odd[8 + 64 + 5] |= 0x03; /* code 3 (+2) in row 2: fits tq2_0, not tq1_0 / ptq1_0 */
        CHECK_STATUS(t2p_unpack(T2P_TYPE_TQ1_0, odd, bytes, src_back, tq1, rows, k), T2P_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(t2p_unpack(T2P_TYPE_PTQ1_0, odd, bytes, src_back, tq2, rows, k), T2P_STATUS_INVALID_ARGUMENT);
        int untouched = 1;
        for (size_t i = 0; i < tq2; i++) untouched &= src_back[i] == 0xEE;
        CHECK(untouched, "failed unpacks wrote output");
        CHECK_STATUS(t2p_unpack(T2P_TYPE_TQ2_0, odd, bytes, src_back, tq2, rows, k), T2P_STATUS_OK);
        xfree(odd);
    }
    xfree(src_back);
    xfree(pq);
    xfree(b2);
    xfree(b1);
    xfree(want);
    xfree(got);
}

/* Mainline's Q2_0 (18-byte blocks of 64: fp16 d, qs[16]) through T2P_TYPE_Q2_0: the group-64 T2P
 * size, the repack, a plan from t2p_plan_init_for (always q8_0) on every ISA equal to ggml's
 * ggml_vec_dot_q2_0_q8_0 written here from its definition, and t2p_unpack back to the bytes. */
static void test_q2_0(size_t rows, size_t k) {
    const size_t nsrc = rows * k / 64, src_bytes = nsrc * 18;
    uint8_t *src = xalloc(src_bytes);
    static const uint16_t scales[] = {0, 0x3800, 0xB400, 0x3C00, 0x2200, 0x4300};
    for (size_t b = 0; b < nsrc; b++) {
        uint16_t h = scales[rnd() % 6];
        src[18 * b] = (uint8_t) h;
        src[18 * b + 1] = (uint8_t) (h >> 8);
        for (int j = 0; j < 16; j++) src[18 * b + 2 + j] = (uint8_t) rnd();
    }
    size_t n = 0, t = 0;
    CHECK_STATUS(t2p_source_size(T2P_TYPE_Q2_0, rows, k, &n), T2P_STATUS_OK);
    CHECK(n == src_bytes, "q2_0 source size %zu", n);
    CHECK_STATUS(t2p_repacked_size(T2P_TYPE_Q2_0, rows, k, &t), T2P_STATUS_OK);
    CHECK(t == (rows + 3) / 4 * (k / 128) * T2P_T2P_G64_BLOCK_BYTES, "q2_0 T2P size %zu", t);
    CHECK_STATUS(t2p_repacked_size(T2P_TYPE_PQ2_0, rows, k, &n), T2P_STATUS_OK);
    CHECK(n == (rows + 3) / 4 * (k / 128) * T2P_T2P_BLOCK_BYTES, "pq2_0 repacked size is the repack size");
    uint8_t *w = xalloc(t);
    CHECK_STATUS(t2p_repack(T2P_TYPE_Q2_0, src, src_bytes, w, t - 1, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack(T2P_TYPE_Q2_0, src, src_bytes, w, t, rows, k), T2P_STATUS_OK);
    uint8_t *back = xalloc(src_bytes);
    CHECK_STATUS(t2p_unpack(T2P_TYPE_Q2_0, w, t, back, src_bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(back, src, src_bytes) == 0, "q2_0 unpack gives the bytes back");

    const size_t ncols = 3;
    float *x = xalloc(sizeof(float) * ncols * k);
    random_floats(x, ncols * k);
    T2pPlan plan;
    CHECK_STATUS(t2p_plan_init_for(&plan, T2P_TYPE_Q2_0, T2P_ACT_Q8_K, rows, k, ncols), T2P_STATUS_OK);
    CHECK(plan.act == T2P_ACT_Q8_0 && plan.scale_group == 64, "q2_0 plan: q8_0, group 64");
    uint8_t *work = xalloc(plan.work_bytes);
    /* ggml's quantizer model: the work buffer then holds ggml block_q8_0 per 32 values. */
    CHECK_STATUS(t2p_plan_quantize(&plan, x, k, ncols * k, model_quantize_q8_0, work, plan.work_bytes, 0, 1),
                 T2P_STATUS_OK);
    ggml_q8_0 *y = xalloc(sizeof(ggml_q8_0) * ncols * k / 32);
    for (size_t c = 0; c < ncols; c++) model_quantize_q8_0(x + c * k, y + c * k / 32, (int64_t) k);
    float *want = xalloc(sizeof(float) * ncols * rows), *got = xalloc(sizeof(float) * ncols * rows);
    for (size_t c = 0; c < ncols; c++)
        for (size_t r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (size_t b = 0; b < k / 64; b++) {
                const uint8_t *blk = src + (r * (k / 64) + b) * 18;
                float s = 0.0f;
                for (int h = 0; h < 2; h++) {
                    const ggml_q8_0 *q = &y[c * k / 32 + 2 * b + (size_t) h];
                    int32_t isum = 0;
                    for (int i = 0; i < 32; i++) {
                        int j = 32 * h + i;
                        isum += (((blk[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * q->qs[i];
                    }
                    float tm = half_to_float(q->d) * (float) isum;
                    s = h == 0 ? tm : s + tm;
                }
                acc = acc + half_to_float((uint16_t) (blk[0] | (blk[1] << 8))) * s;
            }
            want[c * rows + r] = acc;
        }
    for (uint32_t isa = 0; isa < 16; isa++) {
        if (!is_supported_isa(isa)) continue;
        memset(got, 0xFF, sizeof(float) * ncols * rows);
        CHECK_STATUS(t2p_plan_compute(&plan, isa, w, t, work, plan.work_bytes, got, rows, ncols * rows, 0, rows),
                     T2P_STATUS_OK);
        int bad = 0;
        for (size_t i = 0; i < ncols * rows; i++) bad += !same_bits(got[i], want[i]);
        CHECK(bad == 0, "q2_0 %s %zux%zu: %d outputs differ from ggml's Q2_0 dot", t2p_isa_name(isa), rows, k, bad);
    }
    /* The group-64 weights are too big for a group-128 plan's view and vice versa. */
    CHECK_STATUS(t2p_plan_compute(&plan, T2P_ISA_ACTIVE, w, t - 1, work, plan.work_bytes, got, rows, ncols * rows, 0,
                                  rows),
                 T2P_STATUS_BUFFER_TOO_SMALL);
    T2pPlan bad = plan;
    bad.scale_group = 32;
    CHECK_STATUS(t2p_plan_compute(&bad, T2P_ISA_ACTIVE, w, t, work, plan.work_bytes, got, rows, ncols * rows, 0, rows),
                 T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_plan_init_for(&plan, 7, T2P_ACT_Q8_0, rows, k, 1), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_plan_init_for(NULL, T2P_TYPE_Q2_0, T2P_ACT_Q8_0, rows, k, 1), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_repacked_size(T2P_TYPE_Q2_0, rows, 192, &n), T2P_STATUS_INVALID_SHAPE);
    xfree(got);
    xfree(want);
    xfree(y);
    xfree(work);
    xfree(x);
    xfree(back);
    xfree(w);
    xfree(src);
}

/* BitNet: I2_S / IQ2_BN / IQ1_BN written here from their layouts (the codes of an I2_S block:
 * weight j in byte j % 32 at shift 6 - 2 (j / 32); IQ2_BN: per row an f32 scale, weight j of a
 * 64-block in byte j % 16 at shift 2 (j / 16); IQ1_BN: per row an fp16 scale, 13 bytes a
 * 64-block of base-3 digits), repacked, and multiplied with per-token int8 activations on every
 * path, against a C reference of the definition:
 * s = 127 / max(max|x|, 1e-5), q = rint(x * s) clamped, out = (float) sum((c - 1) q) * (d / s). */
static uint8_t iq1_byte(unsigned idx) { return (uint8_t) ((256 * idx + 242) / 243); }
/* The definition: column xc (k values) quantized per token, times row `codes` (k codes), scale dr. */
static float ref_int8(const uint8_t *codes, const float *xc, size_t k, float dr) {
    float amax = 0.0f;
    for (size_t i = 0; i < k; i++) amax = fmaxf(amax, fabsf(xc[i]));
    const float s = 127.0f / fmaxf(amax, 1e-5f);
    int64_t sum = 0;
    for (size_t i = 0; i < k; i++) {
        float q = rintf(xc[i] * s);
        q = q > 127.0f ? 127.0f : q < -128.0f ? -128.0f : q;
        sum += (int64_t) q * ((int) codes[i] - 1);
    }
    return (float) sum * (dr / s);
}
static void test_bitnet(size_t rows, size_t k) {
    static const uint32_t types[] = {T2P_TYPE_I2_S, T2P_TYPE_IQ2_BN, T2P_TYPE_IQ1_BN};
    const int failures_before = failures;
    uint8_t *codes = xalloc(rows * k);
    for (size_t i = 0; i < rows * k; i++) codes[i] = (uint8_t) (rnd() % 3);
    for (size_t i = 0; i < k; i++) codes[i] = 2; /* row 0 all +1 */
    float *d = xalloc(sizeof(float) * rows);
    for (size_t r = 0; r < rows; r++) d[r] = half_to_float((uint16_t) (0x2000 + rnd() % 0x1800)); /* exact in fp16 */
    const size_t ncols = 5, ld_x = k + 1, x_len = (ncols - 1) * ld_x + k;
    float *x = xalloc(sizeof(float) * x_len);
    random_floats(x, x_len);
    for (size_t i = 0; i < k; i++) x[ld_x + i] = (i % 3) ? 1e-7f : -3.5f; /* one large value */
    memset(x + 2 * ld_x, 0, sizeof(float) * k);                         /* all zero: s = 127 / 1e-5 */
    float *got = xalloc(sizeof(float) * ncols * rows);
    for (size_t t = 0; t < 3; t++) {
        const uint32_t ty = types[t];
        size_t src_bytes = 0, w_bytes = 0, blocks_bytes = 0;
        CHECK_STATUS(t2p_source_size(ty, rows, k, &src_bytes), T2P_STATUS_OK);
        CHECK_STATUS(t2p_repacked_size(ty, rows, k, &w_bytes), T2P_STATUS_OK);
        CHECK_STATUS(t2p_repack_size(rows, k, &blocks_bytes), T2P_STATUS_OK);
        CHECK(w_bytes == blocks_bytes + 4 * rows, "type %u: repacked size %zu", ty, w_bytes);
        uint8_t *src = xalloc(src_bytes), *w = xalloc(w_bytes);
        memset(src, 0, src_bytes);
        if (ty == T2P_TYPE_I2_S) {
            CHECK(src_bytes == rows * k / 4 + 32, "i2_s size %zu", src_bytes);
            for (size_t i = 0; i < rows * k; i++) src[i / 128 * 32 + i % 32] |= (uint8_t) (codes[i] << (6 - 2 * (i % 128 / 32)));
            memcpy(src + rows * k / 4, &d[0], 4);
        } else {
            const size_t row_bytes = ty == T2P_TYPE_IQ2_BN ? 4 + k / 4 : 2 + k / 64 * 13;
            CHECK(src_bytes == rows * row_bytes, "type %u size %zu", ty, src_bytes);
            for (size_t r = 0; r < rows; r++) {
                uint8_t *row = src + r * row_bytes;
                const uint8_t *cr = codes + r * k;
                if (ty == T2P_TYPE_IQ2_BN) {
                    memcpy(row, &d[r], 4);
                    for (size_t i = 0; i < k; i++) row[4 + i / 64 * 16 + i % 16] |= (uint8_t) (cr[i] << (2 * (i % 64 / 16)));
                    continue;
                }
                const uint16_t h = float_to_half(d[r]);
                row[0] = (uint8_t) h;
                row[1] = (uint8_t) (h >> 8);
                for (size_t b = 0; b < k / 64; b++) { /* ik_llama.cpp's quantize_one_row_1bn */
                    uint8_t *blk = row + 2 + 13 * b;
                    const uint8_t *q = cr + 64 * b;
                    unsigned last = 0, p3 = 1;
                    for (int quarter = 0; quarter < 4; quarter++, p3 *= 3) {
                        for (int g = 0; g < 3; g++) {
                            unsigned idx = 0, p = 1;
                            for (int j = 0; j < 5; j++, p *= 3) idx += p * q[16 * quarter + 5 * g + j];
                            blk[3 * quarter + g] = iq1_byte(idx);
                        }
                        last += p3 * q[16 * quarter + 15];
                    }
                    blk[12] = iq1_byte(last);
                }
            }
        }
        CHECK_STATUS(t2p_repack(ty, src, src_bytes, w, w_bytes, rows, k), T2P_STATUS_OK);
        const float *scales = (const float *) (w + blocks_bytes);
        int bad_scale = 0;
        for (size_t r = 0; r < rows; r++) bad_scale += !same_bits(scales[r], ty == T2P_TYPE_I2_S ? d[0] : d[r]);
        CHECK(bad_scale == 0, "type %u: %d row scales after the blocks differ", ty, bad_scale);
        T2pPlan plan;
        CHECK_STATUS(t2p_plan_init_for(&plan, ty, T2P_ACT_Q8_0, rows, k, ncols), T2P_STATUS_OK);
        CHECK(plan.act == T2P_ACT_I8, "type %u: plan act %u", ty, plan.act);
        uint8_t *work = xalloc(plan.work_bytes);
        for (uint32_t ith = 3; ith-- > 0;)
            CHECK_STATUS(t2p_plan_quantize(&plan, x, ld_x, x_len, NULL, work, plan.work_bytes, ith, 3), T2P_STATUS_OK);
        for (uint32_t isa = 0; isa < 16; isa++) {
            if (!is_supported_isa(isa)) continue;
            memset(got, 0xFF, sizeof(float) * ncols * rows);
            /* Two row ranges split on a row-group boundary, as two threads would. */
            const size_t mid = rows / 8 * 4;
            CHECK_STATUS(t2p_plan_compute(&plan, isa, w, w_bytes, work, plan.work_bytes, got, rows, ncols * rows, 0, mid),
                         T2P_STATUS_OK);
            CHECK_STATUS(t2p_plan_compute(&plan, isa, w, w_bytes, work, plan.work_bytes, got, rows, ncols * rows, mid, rows),
                         T2P_STATUS_OK);
            int bad = 0;
            for (size_t c = 0; c < ncols; c++)
                for (size_t r = 0; r < rows; r++) {
                    const float dr = ty == T2P_TYPE_I2_S ? d[0] : d[r];
                    bad += !same_bits(got[c * rows + r], ref_int8(codes + r * k, x + c * ld_x, k, dr));
                }
            CHECK(bad == 0, "type %u isa %s %zux%zu: %d outputs differ from the C reference", ty, t2p_isa_name(isa), rows,
                  k, bad);
        }
        /* One column through a one-column plan (the gemv). */
        T2pPlan one;
        CHECK_STATUS(t2p_plan_init_for(&one, ty, T2P_ACT_Q8_K, rows, k, 1), T2P_STATUS_OK);
        uint8_t *work1 = xalloc(one.work_bytes);
        CHECK_STATUS(t2p_plan_quantize(&one, x + 3 * ld_x, k, k, NULL, work1, one.work_bytes, 0, 1), T2P_STATUS_OK);
        CHECK_STATUS(t2p_plan_compute(&one, T2P_ISA_ACTIVE, w, w_bytes, work1, one.work_bytes, got, rows, rows, 0, rows),
                     T2P_STATUS_OK);
        int bad1 = 0;
        for (size_t r = 0; r < rows; r++)
            bad1 += !same_bits(got[r], ref_int8(codes + r * k, x + 3 * ld_x, k, ty == T2P_TYPE_I2_S ? d[0] : d[r]));
        CHECK(bad1 == 0, "type %u: %d one-column outputs differ", ty, bad1);
        /* What a BitNet plan refuses: weights without their scales, a short work buffer, a
         * destination that is not 4-byte aligned, an unpack (the scales have no way back). */
        CHECK_STATUS(t2p_plan_compute(&plan, T2P_ISA_SCALAR, w, w_bytes - 4, work, plan.work_bytes, got, rows,
                                      ncols * rows, 0, rows),
                     T2P_STATUS_BUFFER_TOO_SMALL);
        CHECK_STATUS(t2p_plan_quantize(&plan, x, ld_x, x_len, NULL, work, plan.work_bytes - 4, 0, 1),
                     T2P_STATUS_BUFFER_TOO_SMALL);
        uint8_t *shifted = xalloc(w_bytes + 2);
        CHECK_STATUS(t2p_repack(ty, src, src_bytes, shifted + 2, w_bytes, rows, k), T2P_STATUS_MISALIGNED);
        CHECK_STATUS(t2p_unpack(ty, w, w_bytes, src, src_bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);
        xfree(shifted);
        xfree(work1);
        xfree(work);
        xfree(w);
        xfree(src);
    }
    xfree(got);
    xfree(x);
    xfree(d);
    xfree(codes);
    printf("  bitnet i2_s iq2_bn iq1_bn %2zu x %4zu, 1 and 5 columns: %s\n", rows, k,
           failures > failures_before ? "FAILED" : "bit-exact on every path, equal to the C reference");
}

int main(void) {
    test_version_and_isa();
    static const size_t shapes[][2] = {{4, 256}, {12, 1024}, {6, 384}, {13, 640}, {13, 256}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t rows = shapes[s][0], k = shapes[s][1];
        test_repack(rows, k);
        test_plan(rows, k, T2P_ACT_Q8_K, NULL, k % 256 ? "q8_K asked (q8_0)" : "q8_K");
        test_plan(rows, k, T2P_ACT_Q8_0, NULL, "q8_0 (t2p's)");
        test_plan(rows, k, T2P_ACT_Q8_0, model_quantize_q8_0, "q8_0 (ggml model)");
        test_plan(rows, k, T2P_ACT_Q8_0, extreme_q8_0, "q8_0 (extremes)");
    }
    CHECK(model_calls > 0, "the given from_float was used");
    test_plan_misuse();
    test_repack_misuse();
    test_other_formats(8);
    test_other_formats(7);
    test_q2_0(8, 256);
    test_q2_0(13, 640);
    test_bitnet(8, 256);
    test_bitnet(13, 640);
    if (failures) {
        fprintf(stderr, "test_abi: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_abi: all %d checks passed\n", checks);
    return 0;
}
