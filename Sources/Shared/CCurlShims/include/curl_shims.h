// Fixed-argument wrappers around libcurl's variadic calls: Swift cannot call a C variadic
// function, so each option type gets one wrapper.
#ifndef FLEET_CURL_SHIMS_H
#define FLEET_CURL_SHIMS_H

#include <curl/curl.h>

// curl_easy_setopt, one wrapper per argument type.
CURLcode fleet_curl_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode fleet_curl_setopt_string(CURL *handle, CURLoption option, const char *value);
CURLcode fleet_curl_setopt_pointer(CURL *handle, CURLoption option, void *value);
CURLcode fleet_curl_setopt_off(CURL *handle, CURLoption option, curl_off_t value);
typedef size_t (*fleet_curl_data_callback)(char *data, size_t size, size_t count, void *context);
CURLcode fleet_curl_setopt_data_callback(CURL *handle, CURLoption option, fleet_curl_data_callback callback);

// curl_easy_getinfo, one wrapper per result type.
CURLcode fleet_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);

// curl_multi_setopt.
CURLMcode fleet_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);

#endif
