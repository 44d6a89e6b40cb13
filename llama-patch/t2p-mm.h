/*
 * t2p-mm.h: the ggml-independent half of the T2P extra buffer type (llama-patch/ggml-t2p.cpp).
 *
 * One MUL_MAT `dst = src0 x src1` with src0 a `rows x k` T2P matrix (a repacked pq2_0 weight)
 * and src1 f32 columns, split over `nth` threads the way ggml-cpu runs an op:
 *
 *   1. every thread quantizes its share of src1 into the shared work buffer (q8_K for a single
 *      column, q8_K x4 tiles otherwise) with t2p's own quantizers   -> t2p_mm_quantize()
 *   2. barrier (the caller's: ggml_barrier)
 *   3. the rows are cut into chunks of whole groups of 4 (t2p_mm_chunk_rows: chunk i of n);
 *      thread ith starts with chunk ith and takes further ones as it finishes (the caller's
 *      atomic counter, as ggml's repack does), computing every column of the chunk's rows
 *      through t2p_gemv (one column) or t2p_gemm (several)           -> t2p_mm_compute()
 *   4. optionally the same rows again through the scalar oracle, compared bit for bit
 *                                                                      -> t2p_mm_verify()
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

/* Geometry of one MUL_MAT, byte strides as in ggml's nb[]. */
typedef struct t2p_mm {
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

/* Fills `m` for a MUL_MAT with `ne11 x ne12 x ne13` f32 columns of length `k`. Strides in
 * bytes; the columns themselves must be contiguous (nb10 == sizeof(float), nb0 == sizeof(float)).
 * Returns T2P_STATUS_INVALID_SHAPE for shapes the T2P buffer type does not take. */
static inline T2pStatus t2p_mm_init(t2p_mm * m, const void * w, size_t w_bytes, size_t rows, size_t k,
                                    const void * x, size_t ne11, size_t ne12, size_t ne13,
                                    size_t nb11, size_t nb12, size_t nb13,
                                    void * dst, size_t nb1, size_t nb2, size_t nb3) {
    size_t need = 0, q8 = 0, q8x4 = 0;
    T2pStatus s;

    memset(m, 0, sizeof(*m));
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

/* Thread ith of nth quantizes its share of src1 into `wdata` (t2p_mm_work_size bytes, 4-byte
 * aligned). Units of work: q8_K blocks of a single column, or 4-column tiles; the units of all
 * planes are split into nth contiguous ranges. All threads must finish before t2p_mm_compute. */
static inline T2pStatus t2p_mm_quantize(const t2p_mm * m, void * wdata, size_t wsize, int ith, int nth) {
    const size_t nplanes  = m->ne2 * m->ne3;
    const size_t kblocks  = m->k / 256;
    const size_t units_pp = m->ncols == 1 ? kblocks : (m->ncols + 3) / 4;
    const size_t unit_b   = m->ncols == 1 ? (size_t) T2P_Q8_K_BLOCK_BYTES : kblocks * T2P_Q8_K_X4_BLOCK_BYTES;
    const size_t total    = units_pp * nplanes;
    const size_t u0       = total * (size_t) ith / (size_t) nth;
    const size_t u1       = total * (size_t) (ith + 1) / (size_t) nth;
    size_t u;

    if (wsize < t2p_mm_work_size(m)) {
        return T2P_STATUS_BUFFER_TOO_SMALL;
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

/* Rows [row_begin, row_end) of every column of plane p, from the quantized activations. */
static inline T2pStatus t2p_mm_compute_plane(const t2p_mm * m, const void * wdata, size_t p,
                                             size_t row_begin, size_t row_end, int reference,
                                             float * out, size_t ld_out, size_t out_len) {
    const char * y = (const char *) wdata + p * m->plane_bytes;
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
 * oracle on the same quantized activations, four columns at a time, and compares bit for bit.
 * `*max_abs` gets the largest |dst - reference| (INFINITY when a NaN differs),
 * `*n_diff` the number of outputs whose bits differ. */
static inline T2pStatus t2p_mm_verify(const t2p_mm * m, const void * wdata, size_t b, size_t e,
                                      float * scratch, size_t scratch_len, float * max_abs, size_t * n_diff) {
    const size_t ld = m->d_col / sizeof(float);
    const size_t tile_b = (m->k / 256) * T2P_Q8_K_X4_BLOCK_BYTES;
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
            if (m->ncols == 1) {
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
