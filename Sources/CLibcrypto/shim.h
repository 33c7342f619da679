#pragma once
// OpenSSL's libcrypto, for SHA-256 only: its EVP digest takes the CPU's SHA extensions.
#include <openssl/evp.h>
