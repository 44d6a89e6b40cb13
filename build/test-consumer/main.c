/* Links against t2p::t2p, prints the version and runs one tiny repack + gemv. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "t2p.h"

int main(void) {
    printf("t2p %s (%u), isa %s\n", t2p_version(), (unsigned) t2p_version_number(),
           t2p_isa_name(t2p_active_isa()));

    /* 4 rows x 256: row r has every weight +1 with scale r + 1 (fp16 bits of 1, 2, 3, 4). */
    enum { ROWS = 4, K = 256 };
    static const uint16_t half_bits[ROWS] = { 0x3C00, 0x4000, 0x4200, 0x4400 };
    size_t wbytes = 0, ybytes = 0;
    if (t2p_repack_size(ROWS, K, &wbytes) != T2P_STATUS_OK ||
        t2p_activation_size(K, 1, &ybytes, NULL) != T2P_STATUS_OK) {
        return 1;
    }
    t2p_block_pq2_0 w[ROWS * K / 128];
    for (int b = 0; b < ROWS * K / 128; b++) {
        w[b].d = half_bits[b / (K / 128)];
        memset(w[b].qs, 0xAA, sizeof w[b].qs); /* code 2 = +1 */
    }
    if (wbytes != sizeof w || t2p_repack_pq2_0(w, sizeof w, w, sizeof w, ROWS, K) != T2P_STATUS_OK) {
        return 1;
    }
    float x[K], out[ROWS];
    for (int i = 0; i < K; i++) x[i] = 1.0f;
    void *y = malloc(ybytes);
    if (!y || t2p_quantize_q8_K(x, K, y, ybytes) != T2P_STATUS_OK) return 1;
    T2pStatus s = t2p_gemv(w, sizeof w, ROWS, K, y, ybytes, out, ROWS, 0, ROWS);
    free(y);
    if (s != T2P_STATUS_OK) {
        fprintf(stderr, "t2p_gemv: %s\n", t2p_status_string(s));
        return 1;
    }
    for (int r = 0; r < ROWS; r++) {
        if (out[r] != (float) (256 * (r + 1))) {
            fprintf(stderr, "row %d: %g, want %d\n", r, out[r], 256 * (r + 1));
            return 1;
        }
    }
    printf("gemv ok: %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    return 0;
}
