// The loader's view of the process: each loaded object's program headers
// (dl_iterate_phdr(3)), and the ELF types to read them. Glibc's Swift module leaves
// dl_iterate_phdr out (<link.h> declares it under _GNU_SOURCE only, and _GNU_SOURCE here
// would clash with that module's own types), so it is declared here, with the leading
// fields of glibc's struct dl_phdr_info, which is all that is read.
#include <elf.h>
#include <stddef.h>

struct fieldhal_phdr_info {
    Elf64_Addr address;          // dlpi_addr: the object's load bias
    const char *name;            // dlpi_name
    const Elf64_Phdr *headers;   // dlpi_phdr
    Elf64_Half count;            // dlpi_phnum
};

int dl_iterate_phdr(int (*callback)(struct fieldhal_phdr_info *info, size_t size, void *data), void *data);
