/* Runs t2p-consumer-shared, the shared library with libt2p linked in. */
#include <stdio.h>

#include "shared.h"

int main(void) {
    if (consumer_t2p_check() != 0) {
        fprintf(stderr, "t2p-consumer-dyn: consumer_t2p_check failed\n");
        return 1;
    }
    printf("t2p %s through a shared library\n", consumer_t2p_version());
    return 0;
}
