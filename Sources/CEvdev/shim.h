#pragma once
// evdev force feedback needs only the kernel's UAPI headers (linux-libc-dev).
#include <linux/input.h>
#include <linux/uinput.h>
#include <sys/ioctl.h>
