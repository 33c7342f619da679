// Naming the calling thread, as `ps -L`, `top -H` and /proc/PID/task/TID/comm show it.
// Glibc's Swift module leaves pthread_setname_np out: it is declared under _GNU_SOURCE only.
#define _GNU_SOURCE 1
#include <pthread.h>

// 0, or the errno: ERANGE for a name over 15 bytes.
static inline int fieldhal_thread_set_name(const char *name) {
    return pthread_setname_np(pthread_self(), name);
}
