#pragma once
#include <alsa/asoundlib.h>

// alsa-lib prints its own errors to stderr ("ALSA lib pcm.c:2666: Unknown PCM foo") besides
// returning them. FieldHAL reports each failure once, typed, with advice: silence the
// library's copy. (The handler is variadic, which Swift cannot define: it lives here.)
static void fieldhal_alsa_quiet_handler(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}

static inline void fieldhal_alsa_silence_library_errors(void) {
    snd_lib_error_set_handler(fieldhal_alsa_quiet_handler);
}
