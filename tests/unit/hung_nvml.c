/* An NVML whose init never returns: a hung driver, for the deadline test. */
#include <unistd.h>

int nvmlInit_v2(void) {
    for (;;) pause();
}
int nvmlShutdown(void) {
    return 0;
}
int nvmlSystemGetCudaDriverVersion_v2(int* v) {
    *v = 0;
    return 0;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
    *n = 0;
    return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
    (void)i;
    *d = 0;
    return 0;
}
int nvmlDeviceGetMinorNumber(void* d, unsigned* m) {
    (void)d;
    *m = 0;
    return 0;
}
