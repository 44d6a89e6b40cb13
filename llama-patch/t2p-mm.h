/*
 * t2p-mm.h: the ggml-independent half of the T2P extra buffer type (llama-patch/ggml-t2p.cpp).
 *
 * One MUL_MAT `dst = src0 x src1` with src0 a `rows x k` T2P matrix (a repacked pq2_0, tq1_0 or
 * tq2_0 weight) and src1 f32 columns, split over `nth` threads the way ggml-cpu runs an op:
 *
 *   1. every thread quantizes its share of src1 into the shared work buffer, to the activation
 *      type ggml itself uses with that weight type (its vec_dot_type):
 *        - q8_0 for pq2_0: k / 128 quads per column, columns back to back; through ggml's own
 *          quantize_row_q8_0 (m->q8_0_from_float) + t2p_q8_0_from_ggml, or t2p_quantize_q8_0
 *          when no ggml quantizer is given;
 *        - q8_K for tq1_0 / tq2_0: one q8_K column, or q8_K x4 tiles for several, with t2p's
 *          quantizers (the rounding of ggml's quantize_row_q8_K_ref)   -> t2p_mm_quantize()
 *   2. barrier (the caller's: ggml_barrier)
 *   3. the rows are cut into chunks of whole groups of 4 (t2p_mm_chunk_rows: chunk i of n);
 *      thread ith starts with chunk ith and takes further ones as it finishes (the caller's
 *      atomic counter, as ggml's repack does), computing every column of the chunk's rows
 *      through t2p_gemv[_q8_0] (one column) or t2p_gemm[_q8_0] (several) -> t2p_mm_compute()
 *   4. optionally the same rows again through the scalar oracle, compared bit for bit
 *                                                                      -> t2p_mm_verify()
 *      and (q8_0 through ggml's quantizer) t2p's own quantizer against ggml's
 *                                                                      -> t2p_mm_quantize_check()
 *
 * src1 may have several planes (ggml's ne12 x ne13, broadcast against the single 2-D weight);
 * when src1 and dst are both contiguous across planes, all planes are one batch of columns.
 * Only needs t2p.h and the C standard library, so it compiles (and is tested) without ggml:
 * see llama-patch/check.sh.
 */
#ifndef T2P_MM_H
#define T2P_MM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "t2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation type of a MUL_MAT: the weight type's ggml vec_dot_type. */
typedef enum t2p_mm_act {
    T2P_MM_Q8_K = 0, /* tq1_0, tq2_0 */
    T2P_MM_Q8_0 = 1, /* pq2_0 */
} t2p_mm_act;

/* ggml's from_float signature (ggml_from_float_t): quantizes k floats (a multiple of 32). */
typedef void (*t2p_mm_from_float)(const float * x, void * y, int64_t k);

/* q8_0 quads quantized per call through m->q8_0_from_float (a stack buffer of ggml blocks). */
#define T2P_MM_QUADS_PER_CALL 16

/* Geometry of one MUL_MAT, byte strides as in ggml's nb[]. */
typedef struct t2p_mm {
    t2p_mm_act   act;
    t2p_mm_from_float q8_0_from_float; /* q8_0: ggml's quantize_row_q8_0, or NULL for t2p_quantize_q8_0 */

    const void * w;         /* T2P weights, rows x k */
    size_t       w_bytes;
    size_t       rows;      /* ne01: a multiple of 4 */
    size_t       k;         /* ne00: a multiple of 256 */

    const char * x;         /* src1 data (f32) */
    size_t       x_col;     /* nb11 */
    size_t       x_pl2;     /* nb12 */
    size_t       x_pl3;     /* nb13 */

    char *       dst;       /* dst data (f32) */
    size_t       d_col;     /* nb1 */
    size_t       d_pl2;     /* nb2 */
    size_t       d_pl3;     /* nb3 */

    size_t       ncols;     /* columns per plane (ne11, or ne11*ne12*ne13 when merged) */
    size_t       ne2;       /* planes: ne2 x ne3 (1 x 1 when merged) */
    size_t       ne3;

    size_t       plane_bytes; /* quantized activations of one plane in the work buffer */
} t2p_mm;

/* Fills `m` for a MUL_MAT with `ne11 x ne12 x ne13` f32 columns of length `k` and activation
 * type `act`. Strides in bytes; the columns themselves must be contiguous (nb10 == sizeof(float),
 * nb0 == sizeof(float)). `w_bytes` is the T2P size of the weight (t2p_repack_size: for tq1_0 /
 * tq2_0 more than ggml_nbytes). m->q8_0_from_float is NULL afterwards; set it to use ggml's
 * quantizer. Returns T2P_STATUS_INVALID_SHAPE for shapes the T2P buffer type does not take. */
static inline T2pStatus t2p_mm_init(t2p_mm * m, t2p_mm_act act, const void * w, size_t w_bytes, size_t rows, size_t k,
                                    const void * x, size_t ne11, size_t ne12, size_t ne13,
                                    size_t nb11, size_t nb12, size_t nb13,
                                    void * dst, size_t nb1, size_t nb2, size_t nb3) {
    size_t need = 0, q8 = 0, q8x4 = 0;
    T2pStatus s;

    memset(m, 0, sizeof(*m));
    if (act != T2P_MM_Q8_K && act != T2P_MM_Q8_0) {
        return T2P_STATUS_INVALID_ARGUMENT;
    }
    if (rows == 0 || rows % 4 != 0 || k == 0 || k % 256 != 0 || ne11 == 0 || ne12 == 0 || ne13 == 0) {
        return T2P_STATUS_INVALID_SHAPE;
    }
    if (nb11 % sizeof(float) != 0 || nb1 % sizeof(float) != 0 || nb1 < rows * sizeof(float)) {
        return T2P_STATUS_INVALID_SHAPE;
    }
    s = t2p_repack_size(rows, k, &need);
    if (s != T2P_STATUS_OK) {
        return s;
    }
    if (w_bytes < need) {
        return T2P_STATUS_BUFFER_TOO_SMALL;
    }

    m->act = act;
    m->w = w; m->w_bytes = need; m->rows = rows; m->k = k;
    m->x = (const char *) x; m->x_col = nb11; m->x_pl2 = nb12; m->x_pl3 = nb13;
    m->dst = (char *) dst; m->d_col = nb1; m->d_pl2 = nb2; m->d_pl3 = nb3;
    m->ncols = ne11; m->ne2 = ne12; m->ne3 = ne13;

    /* Planes laid out back to back in both src1 and dst: one batch of columns. */
    if ((ne12 * ne13 > 1) &&
        (ne12 == 1 || (nb12 == nb11 * ne11 && nb2 == nb1 * ne11)) &&
        (ne13 == 1 || (nb13 == nb11 * ne11 * ne12 && nb3 == nb1 * ne11 * ne12))) {
        m->ncols = ne11 * ne12 * ne13;
        m->ne2 = 1;
        m->ne3 = 1;
    }

    if (m->ncols > 1 && nb11 < k * sizeof(float)) {
        return T2P_STATUS_INVALID_SHAPE; /* overlapping columns */
    }
    if (act == T2P_MM_Q8_0) {
        return t2p_activation_size_q8_0(k, m->ncols, &m->plane_bytes);
    }
    s = t2p_activation_size(k, m->ncols, &q8, &q8x4);
    if (s != T2P_STATUS_OK) {
        return s;
    }
    m->plane_bytes = m->ncols == 1 ? q8 : q8x4;
    return T2P_STATUS_OK;
}

/* Bytes of work buffer the op needs (all planes' quantized activations). */
static inline size_t t2p_mm_work_size(const t2p_mm * m) {
    return m->plane_bytes * m->ne2 * m->ne3;
}

/* Rows [*begin, *end) of chunk i of n (e.g. thread ith of nth): whole groups of 4, as even as
 * possible; a chunk may be empty when n exceeds rows / 4. */
static inline void t2p_mm_chunk_rows(size_t rows, size_t i, size_t n, size_t * begin, size_t * end) {
    const size_t groups = rows / 4;
    *begin = 4 * (groups * i / n);
    *end   = 4 * (groups * (i + 1) / n);
}

/* How many row chunks to hand out for nth threads: 4 per thread (so a thread that is
 * descheduled on a busy machine does not hold up the others), at most one per group of 4 rows. */
static inline size_t t2p_mm_chunk_count(size_t rows, int nth) {
    const size_t want = nth <= 1 ? 1 : 4 * (size_t) nth;
    return want < rows / 4 ? want : rows / 4;
}

static inline const float * t2p_mm_x_plane(const t2p_mm * m, size_t p) {
    return (const float *) (m->x + (p % m->ne2) * m->x_pl2 + (p / m->ne2) * m->x_pl3);
}

static inline float * t2p_mm_dst_plane(const t2p_mm * m, size_t p) {
    return (float *) (m->dst + (p % m->ne2) * m->d_pl2 + (p / m->ne2) * m->d_pl3);
}

/* q8_0: the run of quads starting at unit u (a quad of one column of one plane, units of all
 * planes numbered plane by plane, column by column) that stays within its column and below u1.
 * Returns its length; *x gets its first float, *y_off its byte offset in the work buffer. */
static inline size_t t2p_mm_q8_0_run(const t2p_mm * m, size_t u, size_t u1, const float ** x, size_t * y_off) {
    const size_t nq    = m->k / 128;
    const size_t upp   = m->ncols * nq;
    const size_t p     = u / upp;
    const size_t c     = (u % upp) / nq;
    const size_t q0    = u % nq;
    const size_t n     = (nq - q0) < (u1 - u) ? (nq - q0) : (u1 - u);
    *x     = (const float *) ((const char *) t2p_mm_x_plane(m, p) + c * m->x_col) + q0 * 128;
    *y_off = p * m->plane_bytes + (c * nq + q0) * (size_t) T2P_Q8_0_QUAD_BLOCK_BYTES;
    return n;
}

/* q8_0 units [u0, u1) of thread ith of nth. */
static inline void t2p_mm_q8_0_share(const t2p_mm * m, int ith, int nth, size_t * u0, size_t * u1) {
    const size_t total = m->ncols * (m->k / 128) * m->ne2 * m->ne3;
    *u0 = total * (size_t) ith / (size_t) nth;
    *u1 = total * (size_t) (ith + 1) / (size_t) nth;
}

/* n q8_0 quads of x into y: ggml's quantizer + t2p_q8_0_from_ggml, or t2p_quantize_q8_0. */
static inline T2pStatus t2p_mm_quantize_q8_0(const t2p_mm * m, const float * x, size_t n, void * y) {
    uint16_t  tmp[T2P_MM_QUADS_PER_CALL * 4 * (T2P_GGML_Q8_0_BLOCK_BYTES / 2)]; /* 2-byte aligned block_q8_0 */
    size_t    i;
    T2pStatus s = T2P_STATUS_OK;

    if (m->q8_0_from_float == NULL) {
        return t2p_quantize_q8_0(x, n * 128, y, n * (size_t) T2P_Q8_0_QUAD_BLOCK_BYTES);
    }
    for (i = 0; i < n && s == T2P_STATUS_OK; i += T2P_MM_QUADS_PER_CALL) {
        const size_t c = (n - i) < T2P_MM_QUADS_PER_CALL ? (n - i) : T2P_MM_QUADS_PER_CALL;
        m->q8_0_from_float(x + i * 128, tmp, (int64_t) (c * 128));
        s = t2p_q8_0_from_ggml(tmp, c * 4 * (size_t) T2P_GGML_Q8_0_BLOCK_BYTES, c * 128,
                               (char *) y + i * (size_t) T2P_Q8_0_QUAD_BLOCK_BYTES, c * (size_t) T2P_Q8_0_QUAD_BLOCK_BYTES);
    }
    return s;
}

/* Thread ith of nth quantizes its share of src1 into `wdata` (t2p_mm_work_size bytes, 4-byte
 * aligned). Units of work: q8_0 quads (128 values of one column), or for q8_K the q8_K blocks of
 * a single column or 4-column tiles; the units of all planes are split into nth contiguous
 * ranges. All threads must finish before t2p_mm_compute. */
static inline T2pStatus t2p_mm_quantize(const t2p_mm * m, void * wdata, size_t wsize, int ith, int nth) {
    const size_t nplanes  = m->ne2 * m->ne3;
    const size_t kblocks  = m->k / 256;
    const size_t units_pp = m->ncols == 1 ? kblocks : (m->ncols + 3) / 4;
    const size_t unit_b   = m->ncols == 1 ? (size_t) T2P_Q8_K_BLOCK_BYTES : kblocks * T2P_Q8_K_X4_BLOCK_BYTES;
    const size_t total    = units_pp * nplanes;
    size_t       u0       = total * (size_t) ith / (size_t) nth;
    size_t       u1       = total * (size_t) (ith + 1) / (size_t) nth;
    size_t u;

    if (wsize < t2p_mm_work_size(m)) {
        return T2P_STATUS_BUFFER_TOO_SMALL;
    }
    if (m->act == T2P_MM_Q8_0) {
        t2p_mm_q8_0_share(m, ith, nth, &u0, &u1);
        for (u = u0; u < u1;) {
            const float * x;
            size_t        off;
            const size_t  n = t2p_mm_q8_0_run(m, u, u1, &x, &off);
            T2pStatus     s = t2p_mm_quantize_q8_0(m, x, n, (char *) wdata + off);
            if (s != T2P_STATUS_OK) {
                return s;
            }
            u += n;
        }
        return T2P_STATUS_OK;
    }
    for (u = u0; u < u1;) {
        const size_t p     = u / units_pp;
        const size_t first = u % units_pp;
        /* this plane's units in [u, u1) */
        const size_t last  = (u1 - p * units_pp) < units_pp ? (u1 - p * units_pp) : units_pp;
        const float * xp   = t2p_mm_x_plane(m, p);
        char * yp          = (char *) wdata + p * m->plane_bytes + first * unit_b;
        T2pStatus s;

        if (m->ncols == 1) {
            s = t2p_quantize_q8_K(xp + first * 256, (last - first) * 256, yp, (last - first) * unit_b);
        } else {
            const size_t c0    = first * 4;
            const size_t c1    = last * 4 < m->ncols ? last * 4 : m->ncols;
            const size_t ld    = m->x_col / sizeof(float);
            s = t2p_quantize_q8_K_x4(xp + c0 * ld, ld, m->k, c1 - c0, yp, (last - first) * unit_b);
        }
        if (s != T2P_STATUS_OK) {
            return s;
        }
        u = (p + 1) * units_pp;
    }
    return T2P_STATUS_OK;
}

/* T2P_VERIFY for q8_0 through ggml's quantizer: thread ith of nth re-quantizes its share of
 * src1 with t2p_quantize_q8_0 and compares with what t2p_mm_quantize wrote into `wdata`;
 * `*n_quads` gets the quads compared, `*n_diff` those whose bytes differ. Nothing to do (0, 0)
 * for q8_K or when t2p's quantizer is the one in use. */
static inline T2pStatus t2p_mm_quantize_check(const t2p_mm * m, const void * wdata, int ith, int nth, size_t * n_quads,
                                              size_t * n_diff) {
    uint32_t mine[T2P_MM_QUADS_PER_CALL * T2P_Q8_0_QUAD_BLOCK_BYTES / 4]; /* 4-byte aligned quads */
    size_t   u0, u1, u, i;

    *n_quads = 0;
    *n_diff  = 0;
    if (m->act != T2P_MM_Q8_0 || m->q8_0_from_float == NULL) {
        return T2P_STATUS_OK;
    }
    t2p_mm_q8_0_share(m, ith, nth, &u0, &u1);
    for (u = u0; u < u1;) {
        const float * x;
        size_t        off;
        const size_t  n = t2p_mm_q8_0_run(m, u, u1, &x, &off);
        for (i = 0; i < n; i += T2P_MM_QUADS_PER_CALL) {
            const size_t c = (n - i) < T2P_MM_QUADS_PER_CALL ? (n - i) : T2P_MM_QUADS_PER_CALL;
            const char * got = (const char *) wdata + off + i * (size_t) T2P_Q8_0_QUAD_BLOCK_BYTES;
            size_t       j;
            T2pStatus    s = t2p_quantize_q8_0(x + i * 128, c * 128, mine, sizeof mine);
            if (s != T2P_STATUS_OK) {
                return s;
            }
            for (j = 0; j < c; j++) {
                *n_diff += memcmp((const char *) mine + j * T2P_Q8_0_QUAD_BLOCK_BYTES,
                                  got + j * T2P_Q8_0_QUAD_BLOCK_BYTES, T2P_Q8_0_QUAD_BLOCK_BYTES) != 0;
            }
            *n_quads += c;
        }
        u += n;
    }
    return T2P_STATUS_OK;
}

/* Rows [row_begin, row_end) of every column of plane p, from the quantized activations. */
static inline T2pStatus t2p_mm_compute_plane(const t2p_mm * m, const void * wdata, size_t p,
                                             size_t row_begin, size_t row_end, int reference,
                                             float * out, size_t ld_out, size_t out_len) {
    const char * y = (const char *) wdata + p * m->plane_bytes;
    if (m->act == T2P_MM_Q8_0) {
        if (m->ncols == 1) {
            return (reference ? t2p_gemv_q8_0_reference : t2p_gemv_q8_0)(m->w, m->w_bytes, m->rows, m->k, y,
                                                                         m->plane_bytes, out, out_len, row_begin, row_end);
        }
        return (reference ? t2p_gemm_q8_0_reference : t2p_gemm_q8_0)(m->w, m->w_bytes, m->rows, m->k, y, m->plane_bytes,
                                                                     m->ncols, out, ld_out, out_len, row_begin, row_end);
    }
    if (m->ncols == 1) {
        return (reference ? t2p_gemv_reference : t2p_gemv)(m->w, m->w_bytes, m->rows, m->k, y, m->plane_bytes,
                                                           out, out_len, row_begin, row_end);
    }
    return (reference ? t2p_gemm_reference : t2p_gemm)(m->w, m->w_bytes, m->rows, m->k, y, m->plane_bytes,
                                                       m->ncols, out, ld_out, out_len, row_begin, row_end);
}

/* Rows [b, e) (multiples of 4) of dst, every column of every plane. */
static inline T2pStatus t2p_mm_compute(const t2p_mm * m, const void * wdata, size_t b, size_t e) {
    const size_t ld = m->d_col / sizeof(float);
    size_t p;
    if (b == e) {
        return T2P_STATUS_OK;
    }
    for (p = 0; p < m->ne2 * m->ne3; p++) {
        T2pStatus s = t2p_mm_compute_plane(m, wdata, p, b, e, 0, t2p_mm_dst_plane(m, p), ld,
                                           (m->ncols - 1) * ld + m->rows);
        if (s != T2P_STATUS_OK) {
            return s;
        }
    }
    return T2P_STATUS_OK;
}

/* Floats of scratch t2p_mm_verify needs per thread. */
static inline size_t t2p_mm_verify_scratch(const t2p_mm * m) {
    return (m->ncols == 1 ? 1 : 4) * m->rows;
}

/* Recomputes rows [b, e) of dst (already computed by t2p_mm_compute) with the scalar
 * oracle (t2p_gemv/gemm[_q8_0]_reference) on the same quantized activations, four columns at a
 * time, and compares bit for bit.
 * `*max_abs` gets the largest |dst - reference| (INFINITY when a NaN differs),
 * `*n_diff` the number of outputs whose bits differ. */
static inline T2pStatus t2p_mm_verify(const t2p_mm * m, const void * wdata, size_t b, size_t e,
                                      float * scratch, size_t scratch_len, float * max_abs, size_t * n_diff) {
    const size_t ld = m->d_col / sizeof(float);
    /* bytes of 4 columns: a q8_K x4 tile, or 4 columns of q8_0 quads */
    const size_t col_b  = (m->k / 128) * (size_t) T2P_Q8_0_QUAD_BLOCK_BYTES;
    const size_t tile_b = m->act == T2P_MM_Q8_0 ? 4 * col_b : (m->k / 256) * T2P_Q8_K_X4_BLOCK_BYTES;
    size_t p, t, c, r;

    *max_abs = 0.0f;
    *n_diff  = 0;
    if (scratch_len < t2p_mm_verify_scratch(m)) {
        return T2P_STATUS_BUFFER_TOO_SMALL;
    }
    if (b == e) {
        return T2P_STATUS_OK;
    }
    for (p = 0; p < m->ne2 * m->ne3; p++) {
        const float * got = t2p_mm_dst_plane(m, p);
        const char * y    = (const char *) wdata + p * m->plane_bytes;
        for (t = 0; t < (m->ncols == 1 ? 1 : (m->ncols + 3) / 4); t++) {
            const size_t nc = m->ncols == 1 ? 1 : (m->ncols - 4 * t < 4 ? m->ncols - 4 * t : 4);
            T2pStatus s;
            if (m->act == T2P_MM_Q8_0) {
                s = t2p_gemm_q8_0_reference(m->w, m->w_bytes, m->rows, m->k, y + t * tile_b, nc * col_b, nc, scratch,
                                            m->rows, nc * m->rows, b, e);
            } else if (m->ncols == 1) {
                s = t2p_gemv_reference(m->w, m->w_bytes, m->rows, m->k, y, m->plane_bytes, scratch, m->rows, b, e);
            } else {
                s = t2p_gemm_reference(m->w, m->w_bytes, m->rows, m->k, y + t * tile_b, tile_b, nc, scratch,
                                       m->rows, 4 * m->rows, b, e);
            }
            if (s != T2P_STATUS_OK) {
                return s;
            }
            for (c = 0; c < nc; c++) {
                const float * g   = got + (4 * t + c) * ld;
                const float * ref = scratch + c * m->rows;
                for (r = b; r < e; r++) {
                    if (memcmp(&g[r], &ref[r], sizeof(float)) != 0) {
                        float d = fabsf(g[r] - ref[r]);
                        if (!(d == d)) {
                            d = INFINITY;
                        }
                        if (d > *max_abs) {
                            *max_abs = d;
                        }
                        (*n_diff)++;
                    }
                }
            }
        }
    }
    return T2P_STATUS_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* T2P_MM_H */
