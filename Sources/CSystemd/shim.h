#pragma once
// libsystemd's sd-bus: logind's shutdown inhibitor for the update hold (FieldHALLogind).
#include <errno.h>
#include <fcntl.h>
#include <systemd/sd-bus.h>

// sd_bus_call_method is variadic, which Swift cannot call: logind's Inhibit(ssss) → h, the
// descriptor duplicated (close-on-exec) so that it outlives the reply. Returns the
// descriptor, or a negative errno; `error` says what logind (or polkit) answered.
static inline int fieldhal_logind_inhibit(sd_bus *bus, const char *what, const char *who, const char *why,
                                          const char *mode, sd_bus_error *error) {
    sd_bus_message *reply = NULL;
    int r = sd_bus_call_method(bus, "org.freedesktop.login1", "/org/freedesktop/login1",
                               "org.freedesktop.login1.Manager", "Inhibit", error, &reply,
                               "ssss", what, who, why, mode);
    if (r < 0) return r;
    int fd = -1;
    r = sd_bus_message_read(reply, "h", &fd);
    if (r >= 0) {
        r = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (r < 0) r = -errno;
    }
    sd_bus_message_unref(reply);
    return r;
}
