#pragma once
// libv4l2.h does not include the kernel's V4L2 definitions: bring them in first.
#include <linux/videodev2.h>
#include <libv4l2.h>
#include <fcntl.h>

// v4l2_open is variadic, which Swift cannot call: give it a fixed signature.
static inline int fieldhal_v4l2_open(const char *path, int flags) {
    return v4l2_open(path, flags);
}
