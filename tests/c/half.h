/* fp16 conversions for the C tests (tests/c/test_abi.c, llama-patch/test/t2p-mm-test.c): their
 * references need IEEE half rounded as ggml rounds it, written once here. */
#ifndef T2P_TEST_HALF_H
#define T2P_TEST_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* IEEE half to float, exact. */
static inline float half_to_float(uint16_t h) {
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

/* float to IEEE half, round to nearest even (as F16C and ggml's GGML_FP32_TO_FP16). */
static inline uint16_t float_to_half(float f) {
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

#endif
