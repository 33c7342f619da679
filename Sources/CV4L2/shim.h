#pragma once
// libv4l2.h does not include the kernel's V4L2 definitions: bring them in first.
#include <linux/videodev2.h>
#include <libv4l2.h>
#include <turbojpeg.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <stdio.h>

// libv4l2 prints its own errors to stderr ("libv4l2: error setting pixformat: Device or
// resource busy") besides returning them; FieldHAL reports each failure once, typed.
static inline void fieldhal_v4l2_silence_library_errors(void) {
    static FILE *null_log;
    if (!null_log) null_log = fopen("/dev/null", "w");
    if (null_log) v4l2_log_file = null_log;
}

// v4l2_open and v4l2_ioctl are variadic, which Swift cannot call: give them fixed signatures.
static inline int fieldhal_v4l2_open(const char *path, int flags) {
    return v4l2_open(path, flags);
}

static inline int fieldhal_v4l2_ioctl(int fd, unsigned long request, void *argument) {
    return v4l2_ioctl(fd, request, argument);
}

// The request codes are function-like macros (_IOWR with sizeof), which Swift does not
// import: give each one the camera uses a constant.
static const unsigned long FIELDHAL_VIDIOC_QUERYCAP = VIDIOC_QUERYCAP;
static const unsigned long FIELDHAL_VIDIOC_ENUM_FMT = VIDIOC_ENUM_FMT;
static const unsigned long FIELDHAL_VIDIOC_ENUM_FRAMESIZES = VIDIOC_ENUM_FRAMESIZES;
static const unsigned long FIELDHAL_VIDIOC_ENUM_FRAMEINTERVALS = VIDIOC_ENUM_FRAMEINTERVALS;
static const unsigned long FIELDHAL_VIDIOC_S_FMT = VIDIOC_S_FMT;
static const unsigned long FIELDHAL_VIDIOC_G_FMT = VIDIOC_G_FMT;
static const unsigned long FIELDHAL_VIDIOC_S_PARM = VIDIOC_S_PARM;
static const unsigned long FIELDHAL_VIDIOC_REQBUFS = VIDIOC_REQBUFS;
static const unsigned long FIELDHAL_VIDIOC_QUERYBUF = VIDIOC_QUERYBUF;
static const unsigned long FIELDHAL_VIDIOC_QBUF = VIDIOC_QBUF;
static const unsigned long FIELDHAL_VIDIOC_DQBUF = VIDIOC_DQBUF;
static const unsigned long FIELDHAL_VIDIOC_STREAMON = VIDIOC_STREAMON;
static const unsigned long FIELDHAL_VIDIOC_STREAMOFF = VIDIOC_STREAMOFF;
