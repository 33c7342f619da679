#pragma once
// libudev: the device events udevd (or the kernel) sends, for hotplug.
#include <libudev.h>
