// OpenSSL's libcrypto, for SHA-256 (EVP_Digest, https://www.openssl.org/docs/man3.0/man3/EVP_Digest.html).
#ifndef TILESPOOL_CCRYPTO_SHIM_H
#define TILESPOOL_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/sha.h>
#endif
