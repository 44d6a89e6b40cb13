/* The two functions t2p-consumer-shared exports. */
#ifndef T2P_CONSUMER_SHARED_H
#define T2P_CONSUMER_SHARED_H
#if defined(_WIN32) && defined(CONSUMER_BUILD)
#define CONSUMER_API __declspec(dllexport)
#elif defined(_WIN32)
#define CONSUMER_API __declspec(dllimport)
#else
#define CONSUMER_API __attribute__((visibility("default")))
#endif
CONSUMER_API int consumer_t2p_check(void);
CONSUMER_API const char *consumer_t2p_version(void);
#endif
