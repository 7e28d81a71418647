/* What the fake MPS control daemon (mps_control.c) and the fake CUDA
 * (cuda.c) share: where the daemon listens and how a size is written. */
#ifndef GPUBIND_FAKE_MPS_H
#define GPUBIND_FAKE_MPS_H

#include <ctype.h>
#include <stdlib.h>

#define FAKE_MPS_DEFAULT_PIPE "/tmp/nvidia-mps"
#define FAKE_MPS_SOCKET "control"

/* The pipe directory: CUDA_MPS_PIPE_DIRECTORY, else the default. */
static inline const char* fake_mps_pipe_dir(void) {
    const char* dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return dir != NULL && dir[0] != '\0' ? dir : FAKE_MPS_DEFAULT_PIPE;
}

/* "2048M", "10G", "1073741824": bytes (K, M, G, T are powers of 1024); 0 for
 * anything else. `end`, when given, gets where the size stops. */
static inline unsigned long long fake_mps_size(const char* text, const char** end) {
    unsigned long long n = 0;
    int digits = 0;
    while (isdigit((unsigned char)*text) && digits < 19) {
        n = n * 10 + (unsigned long long)(*text++ - '0');
        ++digits;
    }
    if (digits == 0) return 0;
    switch (toupper((unsigned char)*text)) {
        case 'T':
            n <<= 10; /* fall through */
        case 'G':
            n <<= 10; /* fall through */
        case 'M':
            n <<= 10; /* fall through */
        case 'K':
            n <<= 10;
            ++text;
            break;
        default:
            break;
    }
    if (end != NULL) *end = text;
    return n;
}

#endif
