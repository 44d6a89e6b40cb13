/*
 * t2p-mm.h: the ggml-independent glue of the T2P buffer type (ggml-t2p.cpp). One MUL_MAT
 * `dst = src0 x src1`, src0 a rows x k T2P matrix, src1 f32 columns in ggml's planes (ne12 x ne13,
 * broadcast against the 2-D weight), run by ggml's threads through t2p's plan: the quantize
 * shares, the row chunks and the kernel choice all come from t2p_plan_*; this file only walks
 * the planes and, under T2P_VERIFY, compares with the scalar oracle. Needs only t2p.h, so
 * llama-patch/check.sh compiles and tests it without ggml.
 *
 * Per thread ith of nth: t2p_mm_quantize(ith, nth); barrier; then for every chunk the thread
 * claims (t2p_mm_chunks of them in all): t2p_mm_compute(chunk), under T2P_VERIFY t2p_mm_verify.
 */
#ifndef T2P_MM_H
#define T2P_MM_H

#include <string.h>

#include "t2p.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct t2p_mm {
    T2pPlan          plan;       /* one plane of columns */
    T2pQ8_0FromFloat from_float; /* q8_0 plans: ggml's quantize_row_q8_0, or NULL for t2p's */
    const void *     w;          /* T2P weights */
    size_t           w_bytes;
    const char *     x;          /* src1 and its byte strides nb11, nb12, nb13 */
    size_t           x_col, x_pl2, x_pl3;
    char *           dst;        /* dst and its byte strides nb1, nb2, nb3 */
    size_t           d_col, d_pl2, d_pl3;
    size_t           ne2, ne3;   /* planes (1 x 1 when src1 and dst planes are back to back) */
    int              verify;     /* the work buffer also holds the oracle's outputs */
} t2p_mm;

/* Fills m for ne11 x ne12 x ne13 columns of length k (rows in float units, strides in bytes), the
 * weights repacked from src_type (T2P_TYPE_*: Q2_0's have a scale per 64 and always take q8_0).
 * An error status means the buffer type cannot serve the op. */
static inline T2pStatus t2p_mm_init(t2p_mm * m, uint32_t src_type, uint32_t act, const void * w, size_t w_bytes,
                                    size_t rows, size_t k, const void * x, size_t ne11, size_t ne12, size_t ne13,
                                    size_t nb11, size_t nb12, size_t nb13, void * dst, size_t nb1, size_t nb2,
                                    size_t nb3, T2pQ8_0FromFloat from_float, int verify) {
    size_t ncols = ne11;
    memset(m, 0, sizeof(*m));
    if (ne11 == 0 || ne12 == 0 || ne13 == 0 || nb11 % sizeof(float) || nb1 % sizeof(float)) {
        return T2P_STATUS_INVALID_SHAPE;
    }
    m->ne2 = ne12;
    m->ne3 = ne13;
    if ((ne12 == 1 || (nb12 == nb11 * ne11 && nb2 == nb1 * ne11)) &&
        (ne13 == 1 || (nb13 == nb11 * ne11 * ne12 && nb3 == nb1 * ne11 * ne12))) {
        ncols = ne11 * ne12 * ne13; /* one batch of columns */
        m->ne2 = m->ne3 = 1;
    }
    m->w = w; m->w_bytes = w_bytes;
    m->x = (const char *) x; m->x_col = nb11; m->x_pl2 = nb12; m->x_pl3 = nb13;
    m->dst = (char *) dst; m->d_col = nb1; m->d_pl2 = nb2; m->d_pl3 = nb3;
    m->verify = verify;
    T2pStatus s = t2p_plan_init_for(&m->plan, src_type, act, rows, k, ncols);
    m->from_float = m->plan.act == T2P_ACT_Q8_0 ? from_float : NULL;
    return s;
}

static inline size_t t2p_mm_planes(const t2p_mm * m) { return m->ne2 * m->ne3; }

/* Floats of one plane of outputs (ld = the dst column stride). */
static inline size_t t2p_mm_out_len(const t2p_mm * m) {
    return (m->plan.ncols - 1) * (m->d_col / sizeof(float)) + m->plan.rows;
}

/* Bytes of ggml's work buffer: every plane's activations, under verify the oracle's outputs too. */
static inline size_t t2p_mm_work_size(const t2p_mm * m) {
    return t2p_mm_planes(m) * (m->plan.work_bytes + (m->verify ? t2p_mm_out_len(m) * sizeof(float) : 0));
}

static inline size_t t2p_mm_chunks(const t2p_mm * m, int nth) {
    size_t n = 1;
    return t2p_plan_chunk_count(&m->plan, (size_t) nth, &n) == T2P_STATUS_OK ? n : 1;
}

static inline const float * t2p_mm_x(const t2p_mm * m, size_t p) {
    return (const float *) (m->x + (p % m->ne2) * m->x_pl2 + (p / m->ne2) * m->x_pl3);
}

static inline float * t2p_mm_dst(const t2p_mm * m, size_t p) {
    return (float *) (m->dst + (p % m->ne2) * m->d_pl2 + (p / m->ne2) * m->d_pl3);
}

static inline char * t2p_mm_work(const t2p_mm * m, void * wdata, size_t p) {
    return (char *) wdata + p * m->plan.work_bytes;
}

/* The oracle's outputs of plane p (verify only), after every plane's activations. */
static inline float * t2p_mm_ref(const t2p_mm * m, void * wdata, size_t p) {
    return (float *) ((char *) wdata + t2p_mm_planes(m) * m->plan.work_bytes) + p * t2p_mm_out_len(m);
}

/* Thread ith of nth quantizes its share of every plane; all must finish before t2p_mm_compute. */
static inline T2pStatus t2p_mm_quantize(const t2p_mm * m, void * wdata, int ith, int nth) {
    const size_t ld = m->x_col / sizeof(float);
    const size_t x_len = (m->plan.ncols - 1) * ld + m->plan.k;
    for (size_t p = 0; p < t2p_mm_planes(m); p++) {
        T2pStatus s = t2p_plan_quantize(&m->plan, t2p_mm_x(m, p), ld, x_len, m->from_float,
                                        t2p_mm_work(m, wdata, p), m->plan.work_bytes, (uint32_t) ith, (uint32_t) nth);
        if (s != T2P_STATUS_OK) {
            return s;
        }
    }
    return T2P_STATUS_OK;
}

/* Chunk i of n of every plane: into dst on the active path, or (oracle, verify only) into the
 * oracle's outputs on the scalar path, and *n_diff gets the outputs whose bits differ from dst. */
static inline T2pStatus t2p_mm_run(const t2p_mm * m, void * wdata, size_t i, size_t n, int oracle, size_t * n_diff) {
    const size_t ld = m->d_col / sizeof(float);
    size_t       b = 0, e = 0;
    T2pStatus    s = t2p_plan_chunk_rows(&m->plan, i, n, &b, &e);
    if (oracle && !m->verify) {
        return T2P_STATUS_INVALID_ARGUMENT; /* the work buffer has no room for the oracle */
    }
    for (size_t p = 0; p < t2p_mm_planes(m) && s == T2P_STATUS_OK && b < e; p++) {
        float * out = t2p_mm_dst(m, p), * ref = oracle ? t2p_mm_ref(m, wdata, p) : out;
        s = t2p_plan_compute(&m->plan, oracle ? T2P_ISA_SCALAR : T2P_ISA_ACTIVE, m->w, m->w_bytes,
                             t2p_mm_work(m, wdata, p), m->plan.work_bytes, ref, ld, t2p_mm_out_len(m), b, e);
        for (size_t c = 0; oracle && c < m->plan.ncols && s == T2P_STATUS_OK; c++) {
            for (size_t r = c * ld + b; r < c * ld + e; r++) {
                *n_diff += memcmp(&out[r], &ref[r], sizeof(float)) != 0;
            }
        }
    }
    return s;
}

static inline T2pStatus t2p_mm_compute(const t2p_mm * m, void * wdata, size_t i, size_t n) {
    return t2p_mm_run(m, wdata, i, n, 0, NULL);
}

/* T2P_VERIFY: chunk i of n again on the scalar oracle, compared bit for bit with dst. */
static inline T2pStatus t2p_mm_verify(const t2p_mm * m, void * wdata, size_t i, size_t n, size_t * n_diff) {
    *n_diff = 0;
    return t2p_mm_run(m, wdata, i, n, 1, n_diff);
}

#ifdef __cplusplus
}
#endif

#endif /* T2P_MM_H */
