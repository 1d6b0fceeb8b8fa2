/*
 * What the test process (which hosts the server) holds, for the cases that
 * bound the server's memory while it streams or buffers, and the byte
 * pattern the streaming cases send and check.
 */
#include "conformance.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CM_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CM_SANITIZER 1
#endif

#ifdef CM_SANITIZER
/* Under ASan (its quarantine keeps freed blocks: +200 MB seen) and TSan
 * (shadow memory) RSS says little about what the server holds: the
 * sanitizer's count of live heap bytes is measured instead. */
size_t __sanitizer_get_current_allocated_bytes(void);
long held_kb(void)
{
    return (long)(__sanitizer_get_current_allocated_bytes() / 1024);
}

const char *held_what(void)
{
    return "live heap";
}
#else
/* The process's resident set in KB; 0 if unknown. */
long held_kb(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    if (fp == NULL)
        return 0;
    while (fgets(line, sizeof line, fp) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(fp);
    return kb;
}

const char *held_what(void)
{
    return "RSS";
}
#endif

unsigned char pattern_byte(uint64_t i)
{
    return (unsigned char)(i ^ (i >> 8) ^ (i >> 16) ^ (i >> 24));
}
