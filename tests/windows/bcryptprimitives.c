/* A one-function bcryptprimitives.dll for running Windows builds of libt2p under Wine 8.
 *
 * Rust's standard library (1.78 and later) takes its random bytes (HashMap seeds) from
 * ProcessPrng in bcryptprimitives.dll, which Windows 10 and later export and Wine 8 (Debian 12)
 * does not, so a Rust program that links libt2p fails to start there. This DLL, copied beside
 * the .exe, provides ProcessPrng over RtlGenRandom (advapi32's SystemFunction036), which Wine
 * has. It is a test aid for tests/platforms.sh only: real Windows has the function itself.
 *
 *   x86_64-w64-mingw32-gcc -shared -O2 -o bcryptprimitives.dll bcryptprimitives.c -ladvapi32
 */
#include <windows.h>

BOOLEAN NTAPI SystemFunction036(PVOID buffer, ULONG length); /* RtlGenRandom */

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) { /* RtlGenRandom takes a ULONG length */
        ULONG n = len > 0x40000000u ? 0x40000000u : (ULONG) len;
        if (!SystemFunction036(data, n)) return FALSE;
        data += n;
        len -= n;
    }
    return TRUE; /* Windows documents ProcessPrng as always returning TRUE */
}
