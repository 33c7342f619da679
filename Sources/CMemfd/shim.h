// Sealed anonymous memory (memfd_create(2), F_ADD_SEALS): how bulk bytes cross the plugin
// channel. Glibc's Swift module leaves both out: they are declared under _GNU_SOURCE only.
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <sys/mman.h>

// A memfd that can be sealed, closed on exec.
static inline int fieldhal_memfd_create(const char *name) {
    return memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
}

// Seals its size and contents for good: the receiver may trust what it maps.
static inline int fieldhal_memfd_seal(int descriptor) {
    return fcntl(descriptor, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
}

// 1 when the descriptor is a memfd whose size and contents can no longer change.
static inline int fieldhal_memfd_is_sealed(int descriptor) {
    int seals = fcntl(descriptor, F_GET_SEALS);
    int wanted = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
    return seals >= 0 && (seals & wanted) == wanted;
}
