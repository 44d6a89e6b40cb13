/* A shared library that links libt2p statically (t2p_link_private) and exports one function of
 * its own: tests check that it exports nothing else (none of libt2p's symbols). */
#include "t2p.h"
#include "shared.h"

CONSUMER_API int consumer_t2p_check(void) {
    const char *v = t2p_version();
    return v && v[0] != '\0' && t2p_isa_name(t2p_active_isa()) != NULL ? 0 : 1;
}

CONSUMER_API const char *consumer_t2p_version(void) { return t2p_version(); }
