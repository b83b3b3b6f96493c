/*
 * Fake CUDA driver library (libcuda) for edgegpu tests. Never shipped.
 *
 * It exports the driver-API entry points that `devicequery` uses, with NVIDIA's C ABI, so the
 * production dlopen/dlsym path runs unchanged against it. Each test describes the machine it
 * wants in a small text file whose path is in the environment variable
 * EDGEGPU_FAKE_CUDA_CONFIG (written by `edgegpu_testkit::cuda::FakeCuda`). Line format, one
 * directive per line, `#` at the start of a line begins a comment:
 *
 *   driver_version <int>          value for cuDriverGetVersion, e.g. 12040 (default 12040)
 *   device_count <int>            value for cuDeviceGetCount (default: number of `device` lines)
 *   device                        starts the description of the next device (ordinal 0, 1, ...)
 *   name <text to end of line>    cuDeviceGetName
 *   total_mem <bytes>             cuDeviceTotalMem_v2
 *   attr <CUdevice_attribute number> <int>   cuDeviceGetAttribute; unset ones fail with
 *                                 CUDA_ERROR_INVALID_VALUE like an unknown attribute would
 *   uuid <32 hex digits>          cuDeviceGetUuid(_v2); unset → CUDA_ERROR_NOT_SUPPORTED
 *   peer <from> <to> <0|1>        cuDeviceCanAccessPeer (default 0)
 *   result <function|all> <code>  make that entry point (or every one) return <code>
 *
 * Variants (see testkit/build.rs): FAKE_CUDA_LEGACY_10_2 leaves out the symbols a CUDA 10.2
 * driver does not have (cuDeviceGetUuid_v2, CUDA 11.4); FAKE_CUDA_LEGACY_9_0 also leaves out
 * cuDeviceGetUuid (CUDA 9.2); FAKE_CUDA_OMIT_TOTAL_MEM leaves out a symbol devicequery
 * requires; FAKE_CUDA_STUB behaves like the toolkit's stub libcuda.so: every call returns
 * CUDA_ERROR_STUB_LIBRARY and no configuration is read.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct {
    char bytes[16];
} CUuuid;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_UNKNOWN 999

#define EXPORT __attribute__((visibility("default")))

#ifdef FAKE_CUDA_STUB

/* The toolkit stub: links fine, does nothing (so the parameters go unused). */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define STUB_FN(decl) \
    EXPORT CUresult decl { return CUDA_ERROR_STUB_LIBRARY; }
STUB_FN(cuInit(unsigned int flags))
STUB_FN(cuDriverGetVersion(int *v))
STUB_FN(cuDeviceGetCount(int *n))
STUB_FN(cuDeviceGet(CUdevice *d, int ordinal))
STUB_FN(cuDeviceGetName(char *name, int len, CUdevice d))
STUB_FN(cuDeviceTotalMem_v2(size_t *bytes, CUdevice d))
STUB_FN(cuDeviceGetAttribute(int *v, int attrib, CUdevice d))
STUB_FN(cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer))
STUB_FN(cuDeviceGetUuid(CUuuid *uuid, CUdevice d))
STUB_FN(cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice d))
STUB_FN(cuGetErrorName(CUresult error, const char **s))
STUB_FN(cuGetErrorString(CUresult error, const char **s))

#else

#define MAX_DEVICES 16
#define MAX_ATTRIBUTE 256
#define MAX_RESULTS 32

struct fake_device {
    char name[256];
    unsigned long long total_mem;
    int attr[MAX_ATTRIBUTE];
    unsigned char attr_set[MAX_ATTRIBUTE];
    unsigned char uuid[16];
    int has_uuid;
};

static struct {
    int loaded;
    int initialized;
    int driver_version;
    int device_count; /* -1: number of described devices */
    int ndev;
    struct fake_device dev[MAX_DEVICES];
    int peer[MAX_DEVICES][MAX_DEVICES];
    struct {
        char function[64];
        int code;
    } results[MAX_RESULTS];
    int nresults;
} cfg;

static void config_error(const char *path, int line, const char *what) {
    fprintf(stderr, "fake libcuda: %s:%d: %s\n", path, line, what);
    exit(97);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

static long long parse_int(const char *path, int line, const char *text) {
    char *end = NULL;
    long long v = strtoll(text, &end, 0);
    if (end == text || *trim(end) != '\0') config_error(path, line, "expected an integer");
    return v;
}

static struct fake_device *current_device(const char *path, int line) {
    if (cfg.ndev == 0) config_error(path, line, "device property before the first `device` line");
    return &cfg.dev[cfg.ndev - 1];
}

static void load_config(void) {
    if (cfg.loaded) return;
    cfg.loaded = 1;
    cfg.driver_version = 12040;
    cfg.device_count = -1;
    const char *path = getenv("EDGEGPU_FAKE_CUDA_CONFIG");
    if (path == NULL || *path == '\0') {
        fprintf(stderr, "fake libcuda: EDGEGPU_FAKE_CUDA_CONFIG is not set\n");
        exit(97);
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) config_error(path, 0, "cannot open the configuration file");
    char buf[1024];
    int line = 0;
    while (fgets(buf, sizeof buf, f) != NULL) {
        line++;
        char *s = trim(buf);
        if (*s == '\0' || *s == '#') continue;
        char *key = s;
        char *rest = s;
        while (*rest != '\0' && !isspace((unsigned char)*rest)) rest++;
        if (*rest != '\0') *rest++ = '\0';
        rest = trim(rest);
        if (strcmp(key, "driver_version") == 0) {
            cfg.driver_version = (int)parse_int(path, line, rest);
        } else if (strcmp(key, "device_count") == 0) {
            cfg.device_count = (int)parse_int(path, line, rest);
        } else if (strcmp(key, "device") == 0) {
            if (cfg.ndev == MAX_DEVICES) config_error(path, line, "too many devices");
            cfg.ndev++;
        } else if (strcmp(key, "name") == 0) {
            struct fake_device *d = current_device(path, line);
            snprintf(d->name, sizeof d->name, "%s", rest);
        } else if (strcmp(key, "total_mem") == 0) {
            current_device(path, line)->total_mem = (unsigned long long)parse_int(path, line, rest);
        } else if (strcmp(key, "attr") == 0) {
            struct fake_device *d = current_device(path, line);
            char *value = rest;
            while (*value != '\0' && !isspace((unsigned char)*value)) value++;
            if (*value == '\0') config_error(path, line, "attr needs <number> <value>");
            *value++ = '\0';
            long long id = parse_int(path, line, rest);
            if (id < 0 || id >= MAX_ATTRIBUTE) config_error(path, line, "attribute number out of range");
            d->attr[id] = (int)parse_int(path, line, trim(value));
            d->attr_set[id] = 1;
        } else if (strcmp(key, "uuid") == 0) {
            struct fake_device *d = current_device(path, line);
            if (strlen(rest) != 32) config_error(path, line, "uuid needs 32 hex digits");
            for (int i = 0; i < 16; i++) {
                unsigned int byte;
                if (sscanf(rest + 2 * i, "%2x", &byte) != 1) config_error(path, line, "bad hex digit in uuid");
                d->uuid[i] = (unsigned char)byte;
            }
            d->has_uuid = 1;
        } else if (strcmp(key, "peer") == 0) {
            int from, to, can;
            if (sscanf(rest, "%d %d %d", &from, &to, &can) != 3 || from < 0 || to < 0 || from >= MAX_DEVICES ||
                to >= MAX_DEVICES)
                config_error(path, line, "peer needs <from> <to> <0|1>");
            cfg.peer[from][to] = can;
        } else if (strcmp(key, "result") == 0) {
            if (cfg.nresults == MAX_RESULTS) config_error(path, line, "too many result lines");
            char function[64];
            int code;
            if (sscanf(rest, "%63s %d", function, &code) != 2) config_error(path, line, "result needs <function> <code>");
            snprintf(cfg.results[cfg.nresults].function, sizeof cfg.results[0].function, "%s", function);
            cfg.results[cfg.nresults].code = code;
            cfg.nresults++;
        } else {
            config_error(path, line, "unknown directive");
        }
    }
    fclose(f);
}

/* The configured failure for `function`, or CUDA_SUCCESS. */
static CUresult forced_result(const char *function) {
    load_config();
    for (int i = 0; i < cfg.nresults; i++) {
        if (strcmp(cfg.results[i].function, function) == 0 || strcmp(cfg.results[i].function, "all") == 0)
            return cfg.results[i].code;
    }
    return CUDA_SUCCESS;
}

/* Like the real driver: most calls fail until cuInit succeeded. */
#define ENTER(function)                                     \
    do {                                                    \
        CUresult forced = forced_result(function);          \
        if (forced != CUDA_SUCCESS) return forced;          \
        if (!cfg.initialized) return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

static int device_count(void) { return cfg.device_count >= 0 ? cfg.device_count : cfg.ndev; }

static struct fake_device *device(CUdevice d) {
    if (d < 0 || d >= device_count() || d >= cfg.ndev) return NULL;
    return &cfg.dev[d];
}

EXPORT CUresult cuInit(unsigned int flags) {
    CUresult forced = forced_result("cuInit");
    if (forced != CUDA_SUCCESS) return forced;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    cfg.initialized = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    CUresult forced = forced_result("cuDriverGetVersion");
    if (forced != CUDA_SUCCESS) return forced;
    if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
    *v = cfg.driver_version;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
    ENTER("cuDeviceGetCount");
    if (n == NULL) return CUDA_ERROR_INVALID_VALUE;
    *n = device_count();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    ENTER("cuDeviceGet");
    if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (device(ordinal) == NULL) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    ENTER("cuDeviceGetName");
    struct fake_device *dev = device(d);
    if (dev == NULL) return CUDA_ERROR_INVALID_DEVICE;
    if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", dev->name);
    return CUDA_SUCCESS;
}

#ifndef FAKE_CUDA_OMIT_TOTAL_MEM
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    ENTER("cuDeviceTotalMem_v2");
    struct fake_device *dev = device(d);
    if (dev == NULL) return CUDA_ERROR_INVALID_DEVICE;
    if (bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)dev->total_mem;
    return CUDA_SUCCESS;
}
#endif

EXPORT CUresult cuDeviceGetAttribute(int *v, int attrib, CUdevice d) {
    ENTER("cuDeviceGetAttribute");
    struct fake_device *dev = device(d);
    if (dev == NULL) return CUDA_ERROR_INVALID_DEVICE;
    if (v == NULL || attrib < 0 || attrib >= MAX_ATTRIBUTE || !dev->attr_set[attrib]) return CUDA_ERROR_INVALID_VALUE;
    *v = dev->attr[attrib];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer) {
    ENTER("cuDeviceCanAccessPeer");
    if (device(d) == NULL || device(peer) == NULL) return CUDA_ERROR_INVALID_DEVICE;
    if (can == NULL) return CUDA_ERROR_INVALID_VALUE;
    *can = cfg.peer[d][peer] ? 1 : 0;
    return CUDA_SUCCESS;
}

#ifndef FAKE_CUDA_LEGACY_9_0
static CUresult get_uuid(const char *function, CUuuid *uuid, CUdevice d) {
    ENTER(function);
    struct fake_device *dev = device(d);
    if (dev == NULL) return CUDA_ERROR_INVALID_DEVICE;
    if (uuid == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!dev->has_uuid) return CUDA_ERROR_NOT_SUPPORTED;
    memcpy(uuid->bytes, dev->uuid, 16);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice d) { return get_uuid("cuDeviceGetUuid", uuid, d); }
#endif

#if !defined(FAKE_CUDA_LEGACY_10_2) && !defined(FAKE_CUDA_LEGACY_9_0)
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice d) { return get_uuid("cuDeviceGetUuid_v2", uuid, d); }
#endif

static const struct {
    int code;
    const char *name;
    const char *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult lookup_error(const char *function, CUresult error, const char **s, int want_name) {
    CUresult forced = forced_result(function);
    if (forced != CUDA_SUCCESS) return forced;
    if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) {
            *s = want_name ? errors[i].name : errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **s) { return lookup_error("cuGetErrorName", error, s, 1); }

EXPORT CUresult cuGetErrorString(CUresult error, const char **s) {
    return lookup_error("cuGetErrorString", error, s, 0);
}

#endif /* FAKE_CUDA_STUB */
