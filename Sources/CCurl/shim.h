// Typed, non-variadic wrappers over libcurl's variadic setters and getters, which Swift cannot call.
// One wrapper per argument type; each forwards to curl_easy_setopt / curl_multi_setopt /
// curl_easy_getinfo (https://curl.se/libcurl/c/curl_easy_setopt.html).
#ifndef TILESPOOL_CCURL_SHIM_H
#define TILESPOOL_CCURL_SHIM_H
#include <curl/curl.h>

typedef size_t (*tilespool_curl_write_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
/* CURLOPT_READFUNCTION's and CURLOPT_SEEKFUNCTION's callbacks (an upload's body read from a file). */
typedef size_t (*tilespool_curl_read_cb)(char *buffer, size_t size, size_t nitems, void *userdata);
typedef int (*tilespool_curl_seek_cb)(void *userdata, curl_off_t offset, int origin);

static inline CURLcode tilespool_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tilespool_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tilespool_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tilespool_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tilespool_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tilespool_easy_setopt_write_cb(CURL *h, CURLoption o, tilespool_curl_write_cb v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tilespool_easy_setopt_read_cb(CURL *h, CURLoption o, tilespool_curl_read_cb v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode tilespool_easy_setopt_seek_cb(CURL *h, CURLoption o, tilespool_curl_seek_cb v) { return curl_easy_setopt(h, o, v); }

static inline CURLMcode tilespool_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }

static inline CURLcode tilespool_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode tilespool_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode tilespool_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode tilespool_easy_getinfo_string(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }

#endif
