#pragma once
// evdev force feedback needs only the kernel's UAPI headers (linux-libc-dev).
#include <linux/input.h>
#include <linux/uinput.h>
#include <sys/ioctl.h>

// The evdev requests are function-like macros (_IOW with sizeof, or a length argument)
// and ioctl is variadic: neither reaches Swift, so each call the haptics use is here.
static inline int fieldhal_evdev_ff_bits(int fd, unsigned char *bits, int length) {
    return ioctl(fd, EVIOCGBIT(EV_FF, length), bits);
}
static inline int fieldhal_evdev_name(int fd, char *name, int length) {
    return ioctl(fd, EVIOCGNAME(length), name);
}
static inline int fieldhal_evdev_id(int fd, struct input_id *id) {
    return ioctl(fd, EVIOCGID, id);
}
static inline int fieldhal_evdev_uniq(int fd, char *uniq, int length) {
    return ioctl(fd, EVIOCGUNIQ(length), uniq);
}
static inline int fieldhal_evdev_effect_slots(int fd, int *count) {
    return ioctl(fd, EVIOCGEFFECTS, count);
}
static inline int fieldhal_evdev_upload(int fd, struct ff_effect *effect) {
    return ioctl(fd, EVIOCSFF, effect);
}
static inline int fieldhal_evdev_erase(int fd, int effect_id) {
    return ioctl(fd, EVIOCRMFF, effect_id);
}
