/* Links against t2p::t2p (or pkg-config's t2p), prints the version and runs one tiny matmul
 * through the plan: repack in place, quantize (two shares, as two threads would), compute the
 * row chunks, on the active path and on the scalar oracle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t2p.h"

int main(void) {
    printf("t2p %s (%u), isa %s\n", t2p_version(), (unsigned) t2p_version_number(),
           t2p_isa_name(t2p_active_isa()));

    /* 6 rows x 256 (a padded last row group): row r has every weight +1 with scale r + 1. */
    enum { ROWS = 6, K = 256, BLOCKS = ROWS * K / 128 };
    static const uint16_t half_bits[ROWS] = { 0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600 };
    size_t wbytes = 0;
    if (t2p_repack_size(ROWS, K, &wbytes) != T2P_STATUS_OK) return 1;
    /* pq2_0 blocks ({ fp16 d; uint8_t qs[32]; }, 34 bytes) at the start of a buffer of the T2P size */
    uint16_t *w = calloc(1, wbytes);
    if (!w) return 1;
    for (int b = 0; b < BLOCKS; b++) {
        uint8_t *blk = (uint8_t *) w + b * T2P_PQ2_0_BLOCK_BYTES;
        memcpy(blk, &half_bits[b / (K / 128)], 2);
        memset(blk + 2, 0xAA, 32); /* code 2 = +1 */
    }
    T2pStatus s = t2p_repack(T2P_TYPE_PQ2_0, w, wbytes, w, wbytes, ROWS, K);

    T2pPlan plan;
    float x[K], out[ROWS], ref[ROWS];
    for (int i = 0; i < K; i++) x[i] = 127.0f; /* q8_0: scale 1, values 127, exact */
    if (s == T2P_STATUS_OK) s = t2p_plan_init(&plan, T2P_ACT_Q8_0, ROWS, K, 1);
    void *work = s == T2P_STATUS_OK ? malloc(plan.work_bytes) : NULL;
    for (uint32_t ith = 0; ith < 2 && s == T2P_STATUS_OK; ith++)
        s = t2p_plan_quantize(&plan, x, K, K, NULL, work, plan.work_bytes, ith, 2);
    size_t n = 0, b = 0, e = 0;
    if (s == T2P_STATUS_OK) s = t2p_plan_chunk_count(&plan, 2, &n);
    for (size_t i = 0; i < n && s == T2P_STATUS_OK; i++) {
        s = t2p_plan_chunk_rows(&plan, i, n, &b, &e);
        if (s == T2P_STATUS_OK)
            s = t2p_plan_compute(&plan, T2P_ISA_ACTIVE, w, wbytes, work, plan.work_bytes, out, ROWS, ROWS, b, e);
    }
    if (s == T2P_STATUS_OK)
        s = t2p_plan_compute(&plan, T2P_ISA_SCALAR, w, wbytes, work, plan.work_bytes, ref, ROWS, ROWS, 0, ROWS);
    free(work);
    free(w);
    if (s != T2P_STATUS_OK) {
        fprintf(stderr, "t2p: %s\n", t2p_status_string(s));
        return 1;
    }
    for (int r = 0; r < ROWS; r++) {
        if (out[r] != (float) (127 * 256 * (r + 1)) || memcmp(&out[r], &ref[r], sizeof(float)) != 0) {
            fprintf(stderr, "row %d: %g (oracle %g), want %d\n", r, out[r], ref[r], 127 * 256 * (r + 1));
            return 1;
        }
    }
    printf("plan ok: %g %g %g %g %g %g\n", out[0], out[1], out[2], out[3], out[4], out[5]);
    return 0;
}
