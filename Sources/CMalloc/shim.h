// glibc's malloc tuning (mallopt), which Glibc's Swift module leaves out.
#include <malloc.h>
