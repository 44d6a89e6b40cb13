/* C unit tests of the t2p ABI: repack, quantize, gemv, gemm (q8_K and q8_0 activations), the
 * stock vec_dot and the unpack to every source format against a small C reference written here
 * from the layout definitions, plus misuse cases. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t2p.h"

static int failures = 0;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            failures++;                                                    \
        }                                                                  \
    } while (0)
#define CHECK_STATUS(call, want)                                                      \
    do {                                                                              \
        T2pStatus got_ = (call);                                                      \
        CHECK(got_ == (want), "status %u (%s), expected %u", (unsigned) got_,         \
              t2p_status_string(got_), (unsigned) (want));                            \
    } while (0)

static uint64_t rng_state = 0x12345678;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t) (rng_state >> 33);
}

/* IEEE half to float, exact. */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t) (h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
    if (exp == 0) {
        float v = ldexpf((float) man, -24);
        return sign ? -v : v;
    }
    if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* pq2_0 block: d (fp16) then 32 code bytes; weight j: (qs[j/4] >> 2*(j%4)) & 3. */
static int pq_code(const uint8_t *block, int j) { return (block[2 + j / 4] >> (2 * (j % 4))) & 3; }
static uint16_t pq_d(const uint8_t *block) { return (uint16_t) (block[0] | (block[1] << 8)); }

/* Reference: row r of a pq2_0 matrix dotted with q8_K column y, float order of the library. */
static float ref_row_dot(const uint8_t *w, size_t k, size_t r, const t2p_block_q8_K *y) {
    size_t nb = k / 128;
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (r * nb + b) * 34;
        const t2p_block_q8_K *yb = &y[b / 2];
        int32_t isum = 0;
        for (int j = 0; j < 128; j++) isum += (pq_code(blk, j) - 1) * yb->qs[128 * (b % 2) + j];
        float dw = half_to_float(pq_d(blk));
        acc = acc + (dw * yb->d) * (float) isum;
    }
    return acc;
}

/* float to IEEE half, round to nearest even (as F16C and ggml's GGML_FP32_TO_FP16). */
static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t) (sign | 0x7c00u | (man ? 0x200u : 0));
    int e = (int) exp - 127 + 15;
    if (e >= 31) return (uint16_t) (sign | 0x7c00u);
    if (e <= 0) { /* half subnormal or zero */
        if (e < -10) return (uint16_t) sign;
        uint32_t m = man | 0x800000u, shift = (uint32_t) (14 - e);
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (h & 1))) h++;
        return (uint16_t) (sign | h);
    }
    uint32_t h = sign | ((uint32_t) e << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry into the exponent is right */
    return (uint16_t) h;
}

/* ggml block_q8_0, written here from its definition: { fp16 d; int8 qs[32]; }, 34 bytes. */
typedef struct {
    uint16_t d;
    int8_t qs[32];
} ggml_q8_0;

/* ggml's x86 (AVX/AVX2) quantize_row_q8_0, from its definition: per 32 values
 * d = fp16(amax / 127), q = round-half-even(x * (127 / amax)), saturated to int8. */
static void ref_quantize_q8_0(const float *x, size_t k, ggml_q8_0 *y) {
    for (size_t b = 0; b < k / 32; b++) {
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

/* Reference: row r of a pq2_0 matrix dotted with a q8_0 column (k / 128 quads), in the float
 * order of ggml's vec_dot_pq2_0_q8_0: acc + d_w * (((d0*i0 + d1*i1) + d2*i2) + d3*i3). */
static float ref_row_dot_q8_0(const uint8_t *w, size_t k, size_t r, const t2p_block_q8_0_quad *y) {
    size_t nb = k / 128;
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (r * nb + b) * 34;
        float s = 0.0f;
        for (int j = 0; j < 4; j++) {
            int32_t isum = 0;
            for (int i = 32 * j; i < 32 * j + 32; i++) isum += (pq_code(blk, i) - 1) * y[b].qs[i];
            float t = y[b].d[j] * (float) isum;
            s = j == 0 ? t : s + t;
        }
        acc = acc + half_to_float(pq_d(blk)) * s;
    }
    return acc;
}

static uint8_t *random_pq2_0(size_t rows, size_t k) {
    size_t n = rows * k / 128;
    uint8_t *w = aligned_alloc(64, (n * 34 + 63) / 64 * 64);
    static const float scales[] = {0.0f, 0.5f, -0.25f, 1.0f, 0.0117f, 3.5f};
    for (size_t b = 0; b < n; b++) {
        uint8_t *blk = w + b * 34;
        float s = scales[rnd() % 6];
        uint16_t h;
        /* Encode a few exact halves by hand: these values are exactly representable. */
        if (s == 0.0f) h = 0;
        else if (s == 0.5f) h = 0x3800;
        else if (s == -0.25f) h = 0xB400;
        else if (s == 1.0f) h = 0x3C00;
        else if (s == 3.5f) h = 0x4300;
        else h = 0x2200; /* ~0.0117 */
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

static void test_version_and_isa(void) {
    CHECK(t2p_version() != NULL && strlen(t2p_version()) >= 5, "version string");
    unsigned maj, min, pat;
    CHECK(sscanf(t2p_version(), "%u.%u.%u", &maj, &min, &pat) == 3, "version format");
    CHECK(t2p_version_number() == maj * 10000 + min * 100 + pat, "version number");
    uint32_t active = t2p_active_isa();
    CHECK(t2p_isa_supported(active), "active ISA supported");
    CHECK(t2p_isa_name(active) != NULL, "active ISA name");
    CHECK(t2p_isa_name(99) == NULL, "unknown ISA name is NULL");
    CHECK(t2p_isa_supported(T2P_ISA_SCALAR), "scalar always supported");
    CHECK_STATUS(t2p_set_isa(99), T2P_STATUS_INVALID_ARGUMENT);
#if defined(__x86_64__)
    CHECK_STATUS(t2p_set_isa(T2P_ISA_NEON_I8MM), T2P_STATUS_UNSUPPORTED_ISA);
#else
    CHECK_STATUS(t2p_set_isa(T2P_ISA_AVX2), T2P_STATUS_UNSUPPORTED_ISA);
#endif
    CHECK(t2p_active_isa() == active, "failed set_isa leaves the path unchanged");
    for (uint32_t s = 0; s < 9; s++) CHECK(t2p_status_string(s) != NULL, "status string %u", s);
    printf("t2p %s, cpu features 0x%x, active path %s\n", t2p_version(), t2p_cpu_features(),
           t2p_isa_name(active));
}

/* Checks the T2P bytes against the layout definition, byte by byte. */
static void check_t2p_layout(const uint8_t *pq, const uint8_t *t2p, size_t rows, size_t k) {
    size_t nb = k / 128;
    int bad = 0;
    for (size_t g = 0; g < rows / 4; g++) {
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = t2p + (g * nb + b) * 136;
            for (int r = 0; r < 4; r++) {
                const uint8_t *src = pq + ((4 * g + r) * nb + b) * 34;
                bad += blk[2 * r] != src[0] || blk[2 * r + 1] != src[1];
            }
            for (int p = 0; p < 2; p++)
                for (int wd = 0; wd < 4; wd++)
                    for (int j = 0; j < 16; j++) {
                        int r = 2 * p + (j >= 8);
                        const uint8_t *src = pq + ((4 * g + r) * nb + b) * 34;
                        for (int s = 0; s < 4; s++) {
                            int kk = 8 * (4 * wd + s) + (j & 7);
                            int u = (blk[8 + 64 * p + 16 * wd + j] >> (2 * s)) & 3;
                            bad += u != pq_code(src, kk);
                        }
                    }
        }
    }
    CHECK(bad == 0, "%d mismatches with the T2P layout definition", bad);
}

static void test_repack(void) {
    const size_t rows = 12, k = 512;
    size_t bytes = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    CHECK(bytes == rows * k / 128 * 34, "repack size %zu", bytes);
    uint8_t *pq = random_pq2_0(rows, k);
    uint8_t *t = aligned_alloc(64, (bytes + 63) / 64 * 64);
    uint8_t *back = aligned_alloc(64, (bytes + 63) / 64 * 64);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, t, bytes, rows, k), T2P_STATUS_OK);
    check_t2p_layout(pq, t, rows, k);
    CHECK_STATUS(t2p_unpack_to_pq2_0(t, bytes, back, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(back, pq, bytes) == 0, "unpack round trip");
    /* In place gives the same bytes as out of place. */
    CHECK_STATUS(t2p_repack_pq2_0(back, bytes, back, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(back, t, bytes) == 0, "in-place repack");
    free(pq);
    free(t);
    free(back);
}

static void test_gemv_gemm(size_t rows, size_t k) {
    size_t bytes = 0, q8 = 0, x4 = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    uint8_t *pq = random_pq2_0(rows, k);
    uint8_t *t = aligned_alloc(64, (bytes + 63) / 64 * 64);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, t, bytes, rows, k), T2P_STATUS_OK);

    for (size_t ncols = 1; ncols <= 9; ncols++) {
        float *x = malloc(sizeof(float) * k * ncols);
        random_floats(x, k * ncols);
        if (ncols == 3) for (size_t i = 0; i < k; i++) x[i] = (i % 2) ? 1e30f : -1e30f; /* extremes */
        if (ncols == 4) memset(x + k, 0, sizeof(float) * k);                           /* a zero column */
        CHECK_STATUS(t2p_activation_size(k, ncols, &q8, &x4), T2P_STATUS_OK);
        t2p_block_q8_K *y = aligned_alloc(64, (q8 + 63) / 64 * 64);
        void *y4 = aligned_alloc(64, (x4 + 63) / 64 * 64);
        for (size_t c = 0; c < ncols; c++)
            CHECK_STATUS(t2p_quantize_q8_K(x + c * k, k, y + c * (k / 256), q8 - c * (k / 256) * sizeof *y), T2P_STATUS_OK);
        CHECK_STATUS(t2p_quantize_q8_K_x4(x, k, k, ncols, y4, x4), T2P_STATUS_OK);
        /* bsums of every q8_K block are the sums of its 16-value groups. */
        for (size_t b = 0; b < ncols * k / 256; b++)
            for (int i = 0; i < 16; i++) {
                int s = 0;
                for (int j = 0; j < 16; j++) s += y[b].qs[16 * i + j];
                CHECK(s == y[b].bsums[i], "bsums");
            }

        const size_t ld = rows + 3;
        float *ref = malloc(sizeof(float) * ld * ncols), *out = malloc(sizeof(float) * ld * ncols);
        for (size_t c = 0; c < ncols; c++)
            for (size_t r = 0; r < rows; r++) ref[c * ld + r] = ref_row_dot(pq, k, r, y + c * (k / 256));
        for (size_t i = 0; i < ld * ncols; i++) out[i] = -7.0f;
        if (ncols == 1) {
            /* Two calls on disjoint row ranges, as two ggml threads would do. */
            CHECK_STATUS(t2p_gemv(t, bytes, rows, k, y, q8, out, ld, 0, 4), T2P_STATUS_OK);
            CHECK_STATUS(t2p_gemv(t, bytes, rows, k, y, q8, out, ld, 4, rows), T2P_STATUS_OK);
            /* The ggml-compatible stock vec_dot on the file layout. */
            for (size_t r = 0; r < rows; r++) {
                float s = 0.0f;
                t2p_vec_dot_pq2_0_q8_K((int) k, &s, 0, pq + r * (k / 128) * 34, 0, y, 0, 1);
                CHECK(same_bits(s, ref[r]), "vec_dot row %zu: %g vs %g", r, s, ref[r]);
            }
        } else {
            CHECK_STATUS(t2p_gemm(t, bytes, rows, k, y4, x4, ncols, out, ld, ld * ncols, 0, 4), T2P_STATUS_OK);
            CHECK_STATUS(t2p_gemm(t, bytes, rows, k, y4, x4, ncols, out, ld, ld * ncols, 4, rows), T2P_STATUS_OK);
        }
        int bad = 0;
        for (size_t c = 0; c < ncols; c++) {
            for (size_t r = 0; r < rows; r++) bad += !same_bits(out[c * ld + r], ref[c * ld + r]);
            for (size_t r = rows; r < ld; r++) bad += out[c * ld + r] != -7.0f; /* stride gap untouched */
        }
        CHECK(bad == 0, "%zux%zu x %zu columns: %d outputs differ from the C reference", rows, k, ncols, bad);
        /* The reference entry points agree too. */
        if (ncols == 1) {
            CHECK_STATUS(t2p_gemv_reference(t, bytes, rows, k, y, q8, out, ld, 0, rows), T2P_STATUS_OK);
        } else {
            CHECK_STATUS(t2p_gemm_reference(t, bytes, rows, k, y4, x4, ncols, out, ld, ld * ncols, 0, rows), T2P_STATUS_OK);
        }
        bad = 0;
        for (size_t c = 0; c < ncols; c++)
            for (size_t r = 0; r < rows; r++) bad += !same_bits(out[c * ld + r], ref[c * ld + r]);
        CHECK(bad == 0, "reference entry point, %zu columns: %d differ", ncols, bad);
        free(x);
        free(y);
        free(y4);
        free(ref);
        free(out);
    }
    free(pq);
    free(t);
}

/* q8_0 activations: t2p_quantize_q8_0 equals ggml's x86 rounding (via t2p_q8_0_from_ggml of the
 * C model above); gemv / gemm, active path and reference, equal the C reference bit for bit. */
static void test_q8_0(size_t rows, size_t k) {
    size_t bytes = 0, qb = 0;
    const size_t nq = k / 128;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    uint8_t *pq = random_pq2_0(rows, k);
    uint8_t *t = aligned_alloc(64, (bytes + 63) / 64 * 64);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, t, bytes, rows, k), T2P_STATUS_OK);

    for (size_t ncols = 1; ncols <= 9; ncols++) {
        float *x = malloc(sizeof(float) * k * ncols);
        random_floats(x, k * ncols);
        if (ncols >= 3) { /* column 1: extremes, ties and zero blocks */
            float *c1 = x + k;
            for (size_t i = 0; i < k; i++) c1[i] = (i % 2) ? 60000.0f : -59999.0f;
            static const float ties[] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 126.5f, -126.5f};
            for (int i = 0; i < 8; i++) c1[32 + i] = ties[i]; /* amax 127: id = 1, halves tie */
            for (int i = 8; i < 32; i++) c1[32 + i] = 0.25f;
            for (int i = 0; i < 32; i++) c1[64 + i] = 0.0f;    /* an all-zero block: d = 0 */
            for (int i = 0; i < 32; i++) c1[96 + i] = 1e-6f * (float) (i - 16); /* tiny scale */
        }
        if (ncols == 4) memset(x + 2 * k, 0, sizeof(float) * k); /* a zero column */
        CHECK_STATUS(t2p_activation_size_q8_0(k, ncols, &qb), T2P_STATUS_OK);
        CHECK(qb == ncols * nq * 160 && qb == ncols * nq * T2P_Q8_0_QUAD_BLOCK_BYTES, "q8_0 size %zu", qb);
        t2p_block_q8_0_quad *y = aligned_alloc(64, (qb + 63) / 64 * 64);
        t2p_block_q8_0_quad *y2 = aligned_alloc(64, (qb + 63) / 64 * 64);
        ggml_q8_0 *g = malloc(sizeof(ggml_q8_0) * k / 32 * ncols);
        CHECK(sizeof(ggml_q8_0) == T2P_GGML_Q8_0_BLOCK_BYTES, "block_q8_0 is 34 bytes");
        for (size_t c = 0; c < ncols; c++) {
            CHECK_STATUS(t2p_quantize_q8_0(x + c * k, k, y + c * nq, qb - c * nq * sizeof *y), T2P_STATUS_OK);
            ref_quantize_q8_0(x + c * k, k, g + c * (k / 32));
        }
        /* the whole batch converted in one call: columns are back to back in both layouts */
        CHECK_STATUS(t2p_q8_0_from_ggml(g, sizeof(ggml_q8_0) * k / 32 * ncols, k * ncols, y2, qb), T2P_STATUS_OK);
        CHECK(memcmp(y, y2, qb) == 0, "%zu columns: t2p_quantize_q8_0 differs from ggml's x86 rounding", ncols);
        int bad = 0;
        for (size_t b = 0; b < ncols * nq; b++)
            for (int j = 0; j < 4; j++) {
                int sum = 0;
                for (int i = 0; i < 32; i++) {
                    sum += y[b].qs[32 * j + i];
                    bad += y[b].qs[32 * j + i] != g[4 * b + (size_t) j].qs[i];
                }
                bad += sum != y[b].sums[j];
                bad += !same_bits(y[b].d[j], half_to_float(g[4 * b + (size_t) j].d));
            }
        CHECK(bad == 0, "%d quad fields differ from the ggml blocks", bad);
        if (ncols >= 3) {
            const t2p_block_q8_0_quad *q = &y[nq]; /* column 1, quad 0 */
            static const int8_t even[8] = {127, 0, 2, 2, 0, -2, 126, -126};
            CHECK(memcmp(&q[0].qs[32], even, 8) == 0 && q[0].d[1] == 1.0f, "ties to even: %d %d %d %d %d %d %d %d",
                  q[0].qs[32], q[0].qs[33], q[0].qs[34], q[0].qs[35], q[0].qs[36], q[0].qs[37], q[0].qs[38],
                  q[0].qs[39]);
            CHECK(q[0].d[2] == 0.0f && q[0].sums[2] == 0, "zero block");
            CHECK(q[0].d[0] == half_to_float(float_to_half(60000.0f / 127.f)), "extreme scale");
        }

        const size_t ld = rows + 3;
        float *ref = malloc(sizeof(float) * ld * ncols), *out = malloc(sizeof(float) * ld * ncols);
        for (size_t c = 0; c < ncols; c++)
            for (size_t r = 0; r < rows; r++) ref[c * ld + r] = ref_row_dot_q8_0(pq, k, r, y + c * nq);
        for (int pass = 0; pass < 2; pass++) { /* active path, then the reference entry points */
            for (size_t i = 0; i < ld * ncols; i++) out[i] = -7.0f;
            if (ncols == 1) {
                T2pStatus (*gemv)(const void *, size_t, size_t, size_t, const void *, size_t, float *, size_t, size_t,
                                  size_t) = pass ? t2p_gemv_q8_0_reference : t2p_gemv_q8_0;
                CHECK_STATUS(gemv(t, bytes, rows, k, y, qb, out, ld, 0, 4), T2P_STATUS_OK);
                CHECK_STATUS(gemv(t, bytes, rows, k, y, qb, out, ld, 4, rows), T2P_STATUS_OK);
                CHECK_STATUS(gemv(t, bytes, rows, k, y, qb, out, ld, 4, 4), T2P_STATUS_OK); /* empty range */
            } else {
                T2pStatus (*gemm)(const void *, size_t, size_t, size_t, const void *, size_t, size_t, float *, size_t,
                                  size_t, size_t, size_t) = pass ? t2p_gemm_q8_0_reference : t2p_gemm_q8_0;
                CHECK_STATUS(gemm(t, bytes, rows, k, y, qb, ncols, out, ld, ld * ncols, 0, 4), T2P_STATUS_OK);
                CHECK_STATUS(gemm(t, bytes, rows, k, y, qb, ncols, out, ld, ld * ncols, 4, rows), T2P_STATUS_OK);
            }
            bad = 0;
            for (size_t c = 0; c < ncols; c++) {
                for (size_t r = 0; r < rows; r++) bad += !same_bits(out[c * ld + r], ref[c * ld + r]);
                for (size_t r = rows; r < ld; r++) bad += out[c * ld + r] != -7.0f; /* stride gap untouched */
            }
            CHECK(bad == 0, "q8_0 %zux%zu x %zu columns (%s): %d outputs differ from the C reference", rows, k, ncols,
                  pass ? "reference" : "active path", bad);
        }
        free(x);
        free(y);
        free(y2);
        free(g);
        free(ref);
        free(out);
    }

    /* Extreme activations that no quantizer writes: -128 and +127 everywhere with the largest
     * fp16 scale, against code 3 (+2) weights among the random ones. */
    {
        ggml_q8_0 *g = malloc(sizeof(ggml_q8_0) * k / 32 * 2);
        for (size_t b = 0; b < k / 32 * 2; b++) {
            g[b].d = (b % 3 == 0) ? 0x7BFF : (b % 3 == 1) ? 0x0001 : 0xBC00; /* 65504, 2^-24, -1 */
            for (int i = 0; i < 32; i++) g[b].qs[i] = (int8_t) ((b / 2) % 2 ? 127 : -128);
        }
        t2p_block_q8_0_quad *y = aligned_alloc(64, nq * 2 * 160);
        CHECK_STATUS(t2p_q8_0_from_ggml(g, sizeof(ggml_q8_0) * k / 32 * 2, 2 * k, y, nq * 2 * 160), T2P_STATUS_OK);
        float *out = malloc(sizeof(float) * rows * 2), *out_ref = malloc(sizeof(float) * rows * 2);
        CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, nq * 2 * 160, 2, out, rows, 2 * rows, 0, rows), T2P_STATUS_OK);
        CHECK_STATUS(t2p_gemm_q8_0_reference(t, bytes, rows, k, y, nq * 2 * 160, 2, out_ref, rows, 2 * rows, 0, rows),
                     T2P_STATUS_OK);
        int bad = 0;
        for (size_t c = 0; c < 2; c++)
            for (size_t r = 0; r < rows; r++) {
                const float want = ref_row_dot_q8_0(pq, k, r, y + c * nq);
                bad += !same_bits(out[c * rows + r], want) + !same_bits(out_ref[c * rows + r], want);
            }
        CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, y + nq, nq * 160, out, rows, 0, rows), T2P_STATUS_OK);
        for (size_t r = 0; r < rows; r++) bad += !same_bits(out[r], ref_row_dot_q8_0(pq, k, r, y + nq));
        CHECK(bad == 0, "extreme q8_0 activations: %d outputs differ", bad);
        free(g);
        free(y);
        free(out);
        free(out_ref);
    }
    free(pq);
    free(t);
}

static void test_q8_0_misuse(void) {
    const size_t rows = 8, k = 256, nq = 2;
    size_t bytes = 0, qb = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    CHECK_STATUS(t2p_activation_size_q8_0(k, 5, NULL), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_activation_size_q8_0(100, 5, &qb), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_activation_size_q8_0(0, 5, &qb), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_activation_size_q8_0(128, 3, &qb), T2P_STATUS_OK);
    CHECK(qb == 3 * 160, "128 x 3: %zu", qb);
    CHECK_STATUS(t2p_activation_size_q8_0(k, SIZE_MAX / 100, &qb), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_activation_size_q8_0(k, 5, &qb), T2P_STATUS_OK);
    uint8_t *pq = random_pq2_0(rows, k);
    uint8_t *t = aligned_alloc(64, (bytes + 63) / 64 * 64);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, t, bytes, rows, k), T2P_STATUS_OK);

    float x[256 * 5];
    random_floats(x, 256 * 5);
    uint8_t *raw = aligned_alloc(64, qb + 64);
    t2p_block_q8_0_quad *y = (t2p_block_q8_0_quad *) raw;
    memset(raw, 0x5A, qb + 64);
    CHECK_STATUS(t2p_quantize_q8_0(NULL, k, y, qb), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_quantize_q8_0(x, k, NULL, qb), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_quantize_q8_0(x, 100, y, qb), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_quantize_q8_0(x, 0, y, qb), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_quantize_q8_0(x, k, y, nq * 160 - 1), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_quantize_q8_0(x, k, raw + 2, qb), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_quantize_q8_0((const float *) (raw + 2), k, y, qb), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_quantize_q8_0((const float *) raw, k, raw + 64, qb), T2P_STATUS_INVALID_ARGUMENT); /* overlap */
    int untouched = 1;
    for (size_t i = 0; i < qb + 64; i++) untouched &= raw[i] == 0x5A;
    CHECK(untouched, "failed q8_0 quantizations wrote output");
    CHECK_STATUS(t2p_quantize_q8_0(x, 128, y, 160), T2P_STATUS_OK); /* one quad: k = 128 is allowed */

    ggml_q8_0 g[8 * 5 + 1];
    ref_quantize_q8_0(x, 256 * 5, g);
    CHECK_STATUS(t2p_q8_0_from_ggml(NULL, sizeof g, k, y, qb), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_q8_0_from_ggml(g, sizeof g, k, NULL, qb), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_q8_0_from_ggml(g, sizeof g, 96, y, qb), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_q8_0_from_ggml(g, 8 * 34 - 1, k, y, qb), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_q8_0_from_ggml(g, sizeof g, k, y, nq * 160 - 1), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_q8_0_from_ggml((const char *) g + 1, sizeof g - 1, k, y, qb), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_q8_0_from_ggml(g, sizeof g, k, raw + 2, qb), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_q8_0_from_ggml(raw + 160, 8 * 34, k, raw, qb), T2P_STATUS_INVALID_ARGUMENT); /* in place */
    CHECK_STATUS(t2p_quantize_q8_0(x, 256 * 5, y, qb), T2P_STATUS_OK);

    float out[8 * 5];
    for (int i = 0; i < 40; i++) out[i] = 42.0f;
    const size_t y1 = nq * 160;
    CHECK_STATUS(t2p_gemv_q8_0(NULL, bytes, rows, k, y, y1, out, 8, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, NULL, y1, out, 8, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, y, y1, NULL, 8, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes - 1, rows, k, y, y1, out, 8, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, y, y1 - 1, out, 8, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, y, y1, out, 7, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, y, y1, out, 8, 2, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, y, y1, out, 8, 0, 12), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, y, y1, out, 8, 8, 4), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, 6, k, y, y1, out, 8, 0, 4), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, 128, y, y1, out, 8, 0, 8), T2P_STATUS_INVALID_SHAPE); /* k % 256 */
    CHECK_STATUS(t2p_gemv_q8_0(t + 1, bytes, rows, k, y, y1, out, 8, 0, 8), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_gemv_q8_0(t, bytes, rows, k, raw + 2, y1, out, 8, 0, 8), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_gemv_q8_0_reference(t, bytes, rows, k, y, y1 - 1, out, 8, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, qb, 5, out, 8, 39, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, qb, 5, out, 7, 40, 0, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, qb, 0, out, 8, 40, 0, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, qb - 1, 5, out, 8, 40, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, qb, 6, out, 8, 48, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, qb, SIZE_MAX / 2, out, 8, 40, 0, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, qb, 5, out, 8, 40, 4, 2), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemm_q8_0(NULL, bytes, rows, k, y, qb, 5, out, 8, 40, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_gemm_q8_0_reference(t, bytes, rows, k, y, qb, 5, NULL, 8, 40, 0, 8), T2P_STATUS_NULL_POINTER);
    untouched = 1;
    for (int i = 0; i < 40; i++) untouched &= out[i] == 42.0f;
    CHECK(untouched, "failed q8_0 calls wrote output");
    CHECK_STATUS(t2p_gemm_q8_0(t, bytes, rows, k, y, qb, 5, out, 8, 40, 0, 8), T2P_STATUS_OK);
    free(pq);
    free(t);
    free(raw);
}

static void test_misuse(void) {
    const size_t rows = 8, k = 256;
    size_t bytes = 0, q8 = 0, x4 = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    CHECK_STATUS(t2p_repack_size(6, k, &bytes), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_repack_size(rows, 384, &bytes), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_repack_size(rows, k, NULL), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_activation_size(k, 5, &q8, &x4), T2P_STATUS_OK);
    CHECK_STATUS(t2p_activation_size(100, 5, &q8, &x4), T2P_STATUS_INVALID_SHAPE);
    uint8_t *pq = random_pq2_0(rows, k);
    uint8_t *t = aligned_alloc(64, 1024), *t_copy = malloc(bytes);
    memset(t, 0xAB, 1024);
    CHECK_STATUS(t2p_repack_pq2_0(NULL, bytes, t, bytes, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, NULL, bytes, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes - 1, t, bytes, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, t, bytes - 1, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, t + 1, bytes, rows, k), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, pq + 34, bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, t, bytes, 5, k), T2P_STATUS_INVALID_SHAPE);
    CHECK(t[0] == 0xAB && t[bytes - 1] == 0xAB, "failed repacks wrote nothing");
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, t, bytes, rows, k), T2P_STATUS_OK);
    memcpy(t_copy, t, bytes);

    float x[256 * 5];
    random_floats(x, 256 * 5);
    t2p_block_q8_K y[1];
    void *y4 = aligned_alloc(64, x4 + 64);
    CHECK_STATUS(t2p_quantize_q8_K(NULL, k, y, sizeof y), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_quantize_q8_K(x, 100, y, sizeof y), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_quantize_q8_K(x, k, y, sizeof y - 1), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_quantize_q8_K(x, k, (char *) y4 + 1, sizeof y), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_quantize_q8_K(x, k, y, sizeof y), T2P_STATUS_OK);
    CHECK_STATUS(t2p_quantize_q8_K_x4(x, k, k, 5, y4, x4 - 1), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_quantize_q8_K_x4(x, k - 1, k, 5, y4, x4), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_quantize_q8_K_x4(x, k, k, 0, y4, x4), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_quantize_q8_K_x4(x, k, k, 5, y4, x4), T2P_STATUS_OK);

    float out[8 * 5];
    for (int i = 0; i < 40; i++) out[i] = 42.0f;
    CHECK_STATUS(t2p_gemv(NULL, bytes, rows, k, y, sizeof y, out, 8, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_gemv(t, bytes, rows, k, NULL, sizeof y, out, 8, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_gemv(t, bytes, rows, k, y, sizeof y, NULL, 8, 0, 8), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_gemv(t, bytes - 1, rows, k, y, sizeof y, out, 8, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemv(t, bytes, rows, k, y, sizeof y - 1, out, 8, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemv(t, bytes, rows, k, y, sizeof y, out, 7, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemv(t, bytes, rows, k, y, sizeof y, out, 8, 2, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemv(t, bytes, rows, k, y, sizeof y, out, 8, 0, 12), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemv(t, bytes, rows, k, y, sizeof y, out, 8, 8, 4), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemv(t, bytes, 6, k, y, sizeof y, out, 8, 0, 4), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemv(t + 1, bytes, rows, k, y, sizeof y, out, 8, 0, 8), T2P_STATUS_MISALIGNED);
    CHECK_STATUS(t2p_gemm(t, bytes, rows, k, y4, x4, 5, out, 8, 39, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemm(t, bytes, rows, k, y4, x4, 5, out, 7, 40, 0, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemm(t, bytes, rows, k, y4, x4, 0, out, 8, 40, 0, 8), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_gemm(t, bytes, rows, k, y4, x4 - 1, 5, out, 8, 40, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_gemm(t, bytes, rows, k, y4, x4, 9, out, 8, 80, 0, 8), T2P_STATUS_BUFFER_TOO_SMALL);
    int untouched = 1;
    for (int i = 0; i < 40; i++) untouched &= out[i] == 42.0f;
    CHECK(untouched, "failed calls wrote output");
    CHECK(memcmp(t, t_copy, bytes) == 0, "weights untouched");
    CHECK_STATUS(t2p_gemm(t, bytes, rows, k, y4, x4, 5, out, 8, 40, 0, 8), T2P_STATUS_OK);

    float s = 0.0f;
    t2p_vec_dot_pq2_0_q8_K(100, &s, 0, pq, 0, y, 0, 1);
    CHECK(isnan(s), "vec_dot with n not a multiple of 256 gives NaN");
    s = 0.0f;
    t2p_vec_dot_pq2_0_q8_K(256, &s, 0, NULL, 0, y, 0, 1);
    CHECK(isnan(s), "vec_dot with NULL x gives NaN");
    s = 0.0f;
    t2p_vec_dot_pq2_0_q8_K(256, &s, 0, pq, 0, y, 0, 2);
    CHECK(isnan(s), "vec_dot with nrc = 2 gives NaN");
    t2p_vec_dot_pq2_0_q8_K(256, NULL, 0, pq, 0, y, 0, 1); /* must not crash */
    free(pq);
    free(t);
    free(t_copy);
    free(y4);
}

/* The same ternary weights (one scale per 256) as pq2_0, tq2_0 and tq1_0 give the same T2P bytes. */
static uint8_t pack5(const int *t, int n) { /* n trits, first one most significant, as tq1_0 */
    unsigned q = 0;
    for (int i = 0; i < n; i++) q = q * 3 + (unsigned) t[i];
    for (int i = n; i < 5; i++) q *= 3;
    return (uint8_t) ((q * 256 + 242) / 243);
}

static void test_other_formats(void) {
    const size_t rows = 8, k = 512, nb256 = k / 256;
    size_t bytes = 0, tq2 = 0, tq1 = 0;
    CHECK_STATUS(t2p_repack_size(rows, k, &bytes), T2P_STATUS_OK);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_TQ2_0, rows, k, &tq2), T2P_STATUS_OK);
    CHECK_STATUS(t2p_source_size(T2P_TYPE_TQ1_0, rows, k, &tq1), T2P_STATUS_OK);
    CHECK(tq2 == rows * nb256 * 66 && tq1 == rows * nb256 * 54, "source sizes %zu %zu", tq2, tq1);
    CHECK_STATUS(t2p_source_size(77, rows, k, &tq1), T2P_STATUS_INVALID_ARGUMENT);
    uint8_t *pq = aligned_alloc(64, (bytes + 63) / 64 * 64);
    t2p_block_tq2_0 *b2 = malloc(tq2);
    t2p_block_tq1_0 *b1 = malloc(tq1);
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
            t2p_block_tq2_0 *q2 = &b2[r * nb256 + i]; /* tq2_0: byte 32h+m holds 128h+m+32l */
            q2->d = d;
            for (int j = 0; j < 64; j++) {
                int h = j / 32, m = j % 32;
                q2->qs[j] = (uint8_t) (code[128 * h + m] | code[128 * h + m + 32] << 2 |
                                       code[128 * h + m + 64] << 4 | code[128 * h + m + 96] << 6);
            }
            t2p_block_tq1_0 *q1 = &b1[r * nb256 + i]; /* tq1_0: ggml's element order */
            q1->d = d;
            for (int m = 0; m < 32; m++) {
                int t[5] = {code[m], code[32 + m], code[64 + m], code[96 + m], code[128 + m]};
                q1->qs[m] = pack5(t, 5);
            }
            for (int m = 0; m < 16; m++) {
                int t[5] = {code[160 + m], code[176 + m], code[192 + m], code[208 + m], code[224 + m]};
                q1->qs[32 + m] = pack5(t, 5);
            }
            for (int j = 0; j < 4; j++) {
                int t[4] = {code[240 + j], code[244 + j], code[248 + j], code[252 + j]};
                q1->qh[j] = pack5(t, 4);
            }
        }
    uint8_t *want = aligned_alloc(64, (bytes + 63) / 64 * 64), *got = aligned_alloc(64, (bytes + 63) / 64 * 64);
    CHECK_STATUS(t2p_repack_pq2_0(pq, bytes, want, bytes, rows, k), T2P_STATUS_OK);
    memset(got, 0, bytes);
    CHECK_STATUS(t2p_repack_to_t2p(T2P_TYPE_TQ2_0, b2, tq2, got, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(got, want, bytes) == 0, "tq2_0 -> T2P equals pq2_0 -> T2P");
    memset(got, 0, bytes);
    CHECK_STATUS(t2p_repack_to_t2p(T2P_TYPE_TQ1_0, b1, tq1, got, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(got, want, bytes) == 0, "tq1_0 -> T2P equals pq2_0 -> T2P");
    memset(got, 0, bytes);
    CHECK_STATUS(t2p_repack_to_t2p(T2P_TYPE_Q2_0_G128, pq, bytes, got, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(got, want, bytes) == 0, "legacy Q2_0 g128 -> T2P equals pq2_0 -> T2P");
    CHECK_STATUS(t2p_repack_to_t2p(T2P_TYPE_TQ1_0, b1, tq1 - 1, got, bytes, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack_to_t2p(T2P_TYPE_TQ1_0, b1, tq1, got, bytes - 1, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_repack_to_t2p(99, b1, tq1, got, bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_repack_to_t2p(T2P_TYPE_TQ2_0, NULL, tq2, got, bytes, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_repack_to_t2p(T2P_TYPE_PQ2_0, pq, bytes, pq, bytes, rows, k), T2P_STATUS_INVALID_ARGUMENT);

    /* ... and back: every source format's original bytes (tq1_0 bytes here are canonical,
     * ceil(256 q / 243), as ggml's quantizer writes them). */
    uint8_t *src_back = malloc(tq2 > bytes ? tq2 : bytes);
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, want, bytes, src_back, tq2, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(src_back, b2, tq2) == 0, "T2P -> tq2_0 gives the original bytes");
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ1_0, want, bytes, src_back, tq1, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(src_back, b1, tq1) == 0, "T2P -> tq1_0 gives the original bytes");
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_PQ2_0, want, bytes, src_back, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(src_back, pq, bytes) == 0, "T2P -> pq2_0 gives the original bytes");
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_Q2_0_G128, want, bytes, src_back, bytes, rows, k), T2P_STATUS_OK);
    CHECK(memcmp(src_back, pq, bytes) == 0, "T2P -> legacy Q2_0 g128 gives the original bytes");
    {
        size_t ptq = 0;
        CHECK_STATUS(t2p_source_size(T2P_TYPE_PTQ1_0, rows, k, &ptq), T2P_STATUS_OK);
        uint8_t *p1 = malloc(ptq), *again = aligned_alloc(64, (bytes + 63) / 64 * 64);
        CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_PTQ1_0, want, bytes, p1, ptq, rows, k), T2P_STATUS_OK);
        CHECK_STATUS(t2p_repack_to_t2p(T2P_TYPE_PTQ1_0, p1, ptq, again, bytes, rows, k), T2P_STATUS_OK);
        CHECK(memcmp(again, want, bytes) == 0, "T2P -> ptq1_0 -> T2P round trip");
        free(p1);
        free(again);
    }
    /* What a format cannot hold: nothing written. */
    memset(src_back, 0xEE, tq2);
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, want, bytes, src_back, tq2 - 1, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, want, bytes - 1, src_back, tq2, rows, k), T2P_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, NULL, bytes, src_back, tq2, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, want, bytes, NULL, tq2, rows, k), T2P_STATUS_NULL_POINTER);
    CHECK_STATUS(t2p_unpack_to_source(77, want, bytes, src_back, tq2, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, want, bytes, src_back, tq2, 6, k), T2P_STATUS_INVALID_SHAPE);
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, want, bytes, want + 2, tq2, rows, k), T2P_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_PQ2_0, want + 1, bytes, src_back, bytes, rows, k), T2P_STATUS_MISALIGNED);
    {
        uint8_t *odd = aligned_alloc(64, (bytes + 63) / 64 * 64);
        memcpy(odd, want, bytes);
        odd[2] ^= 0x01; /* row 1 of the first T2P block: another scale than its 256-block partner */
        CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, odd, bytes, src_back, tq2, rows, k), T2P_STATUS_INVALID_ARGUMENT);
        memcpy(odd, want, bytes);
        odd[8 + 64 + 5] |= 0x03; /* code 3 (+2) in row 2: fits tq2_0, not tq1_0 */
        CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ1_0, odd, bytes, src_back, tq1, rows, k), T2P_STATUS_INVALID_ARGUMENT);
        int untouched = 1;
        for (size_t i = 0; i < tq2; i++) untouched &= src_back[i] == 0xEE;
        CHECK(untouched, "failed unpacks wrote output");
        CHECK_STATUS(t2p_unpack_to_source(T2P_TYPE_TQ2_0, odd, bytes, src_back, tq2, rows, k), T2P_STATUS_OK);
        free(odd);
    }
    free(src_back);
    free(pq);
    free(b2);
    free(b1);
    free(want);
    free(got);
}

int main(void) {
    test_version_and_isa();
    test_repack();
    test_other_formats();
    /* Every path this CPU supports, forced in turn, against the same C reference. */
    for (uint32_t isa = 0; isa < 8; isa++) {
        if (!t2p_isa_supported(isa)) continue;
        CHECK_STATUS(t2p_set_isa(isa), T2P_STATUS_OK);
        CHECK(t2p_active_isa() == isa, "set_isa took effect");
        printf("  path %s\n", t2p_isa_name(isa));
        test_gemv_gemm(4, 256);
        test_gemv_gemm(12, 1024);
        test_misuse();
        test_q8_0(4, 256);
        test_q8_0(12, 1024);
        test_q8_0_misuse();
    }
    if (failures) {
        fprintf(stderr, "test_abi: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_abi: all checks passed\n");
    return 0;
}
