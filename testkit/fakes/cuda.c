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
 *   node <path>                   the device's node (e.g. /dev/nvidia0): like the real driver,
 *                                 which cannot see a GPU whose node is missing, the device is
 *                                 left out (later ones move up) unless <path> is a character
 *                                 device in this process's view (e2e/: proves the node was
 *                                 injected into the container); with none left, cuInit fails
 *                                 with CUDA_ERROR_NO_DEVICE (100) as the real driver's does
 *   result <function|all> <code>  make that entry point (or every one) return <code>
 *   context_overhead <bytes>      device memory a primary context uses (machine-wide, default
 *                                 0), counted in each process's used memory from its creation
 *   mps_limits <enforce|ignore>   `ignore`: MPS memory limits and thread percentages have no
 *                                 effect (a platform where they do not hold; default enforce)
 *   mps_sm_granularity <n>        multiprocessors an active thread percentage is counted in
 *                                 (default 2, the SMs of a TPC; see cuDeviceGetAttribute)
 *
 * Memory: each process has its own used counter per device (no other process is seen).
 * cuDevicePrimaryCtxRetain creates the context (used = context_overhead) on first retain; the
 * last release frees the context's allocations. cuMemAlloc_v2 fails with
 * CUDA_ERROR_OUT_OF_MEMORY when used + size would exceed the capacity: the device's total_mem,
 * or under MPS the per-process limit if lower. cuMemGetInfo_v2: total = total_mem, free =
 * capacity - used.
 *
 * MPS (when CUDA_MPS_PIPE_DIRECTORY is set): the process connects once, at its first context
 * call or MULTIPROCESSOR_COUNT query, to `<pipe>/control` (the fake nvidia-cuda-mps-control,
 * fakes/mps_control.c); with no daemon listening, context calls fail with
 * CUDA_ERROR_MPS_CONNECTION_FAILED. When connected, the daemon's defaults are read from
 * `<pipe>/fake-mps-state` (the last valid `default_device_pinned_mem_limit` line naming the
 * device by ordinal or `GPU-...` UUID wins). The limit is the lower of that default and the
 * client's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry (`<ordinal|UUID>=<n><K|KB|M|MB|G|GB>`,
 * binary units as measured on an H100: `1000M` let a process reach 998 MiB); a client's value
 * only lowers the daemon's (docs.nvidia.com/deploy/mps). Invalid values are ignored. The
 * active thread percentage is the lower of the daemon default and
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
 *
 * Variants (see testkit/build.rs): FAKE_CUDA_LEGACY_10_2 leaves out the symbols a CUDA 10.2
 * driver does not have (cuDevicePrimaryCtxRelease_v2, CUDA 11.0; cuDeviceGetUuid_v2, CUDA 11.4);
 * FAKE_CUDA_LEGACY_9_0 also leaves out cuDeviceGetUuid (CUDA 9.2); FAKE_CUDA_OMIT_TOTAL_MEM
 * leaves out a symbol devicequery requires; FAKE_CUDA_STUB behaves like the toolkit's stub
 * libcuda.so: every call returns CUDA_ERROR_STUB_LIBRARY and no configuration is read.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct {
    char bytes[16];
} CUuuid;
typedef struct CUctx_st *CUcontext;
/* 64-bit targets only, where cuda.h makes it unsigned long long. */
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_MPS_CONNECTION_FAILED 805
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
STUB_FN(cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d))
STUB_FN(cuDevicePrimaryCtxRelease(CUdevice d))
STUB_FN(cuDevicePrimaryCtxRelease_v2(CUdevice d))
STUB_FN(cuCtxSetCurrent(CUcontext ctx))
STUB_FN(cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes))
STUB_FN(cuMemFree_v2(CUdeviceptr ptr))
STUB_FN(cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes))

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
    char node[256]; /* empty: no node required */
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
    unsigned long long context_overhead;
    int mps_ignore;
    int mps_sm_granularity;
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

/* Leaves out the devices whose `node` is not a character device here (peers follow). */
static void drop_devices_without_node(void) {
    int keep[MAX_DEVICES], n = 0;
    for (int i = 0; i < cfg.ndev; i++) {
        struct stat st;
        if (cfg.dev[i].node[0] == '\0' || (stat(cfg.dev[i].node, &st) == 0 && S_ISCHR(st.st_mode)))
            keep[n++] = i;
        else
            fprintf(stderr, "fake libcuda: device %d left out: %s is not a character device here\n", i,
                    cfg.dev[i].node);
    }
    if (n == cfg.ndev) return;
    int peer[MAX_DEVICES][MAX_DEVICES];
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) peer[a][b] = cfg.peer[keep[a]][keep[b]];
    for (int a = 0; a < n; a++) {
        cfg.dev[a] = cfg.dev[keep[a]];
        for (int b = 0; b < n; b++) cfg.peer[a][b] = peer[a][b];
    }
    cfg.ndev = n;
    /* The real driver's cuInit fails with CUDA_ERROR_NO_DEVICE when it sees no GPU at all. */
    if (n == 0 && cfg.nresults < MAX_RESULTS) {
        snprintf(cfg.results[cfg.nresults].function, sizeof cfg.results[0].function, "cuInit");
        cfg.results[cfg.nresults++].code = 100;
    }
}

static void load_config(void) {
    if (cfg.loaded) return;
    cfg.loaded = 1;
    cfg.driver_version = 12040;
    cfg.device_count = -1;
    cfg.mps_sm_granularity = 2;
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
        } else if (strcmp(key, "node") == 0) {
            struct fake_device *d = current_device(path, line);
            snprintf(d->node, sizeof d->node, "%s", rest);
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
        } else if (strcmp(key, "context_overhead") == 0) {
            long long v = parse_int(path, line, rest);
            if (v < 0) config_error(path, line, "context_overhead must not be negative");
            cfg.context_overhead = (unsigned long long)v;
        } else if (strcmp(key, "mps_limits") == 0) {
            if (strcmp(rest, "ignore") == 0) cfg.mps_ignore = 1;
            else if (strcmp(rest, "enforce") == 0) cfg.mps_ignore = 0;
            else config_error(path, line, "mps_limits needs enforce or ignore");
        } else if (strcmp(key, "mps_sm_granularity") == 0) {
            long long v = parse_int(path, line, rest);
            if (v < 1) config_error(path, line, "mps_sm_granularity must be at least 1");
            cfg.mps_sm_granularity = (int)v;
        } else {
            config_error(path, line, "unknown directive");
        }
    }
    fclose(f);
    drop_devices_without_node();
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

/* ---- MPS client --------------------------------------------------------------------------- */

#define NO_LIMIT (~0ULL)

static struct {
    int resolved;  /* environment and daemon looked at (once per process, like a real client) */
    int active;    /* CUDA_MPS_PIPE_DIRECTORY is set */
    int connected; /* a daemon listened on <pipe>/control */
    double percentage;                     /* effective active thread percentage */
    unsigned long long limit[MAX_DEVICES]; /* effective pinned memory limit, NO_LIMIT if none */
} mps;

/* `<n><K|KB|M|MB|G|GB>`, binary units; 0 for anything else (then ignored, like an invalid
 * default at MPS server start). */
static int parse_limit(const char *text, unsigned long long *bytes) {
    const char *p = text;
    unsigned long long value = 0;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) {
        if (value > (NO_LIMIT - 9) / 10) return 0;
        value = value * 10 + (unsigned long long)(*p++ - '0');
    }
    unsigned shift;
    if (strcmp(p, "K") == 0 || strcmp(p, "KB") == 0) shift = 10;
    else if (strcmp(p, "M") == 0 || strcmp(p, "MB") == 0) shift = 20;
    else if (strcmp(p, "G") == 0 || strcmp(p, "GB") == 0) shift = 30;
    else return 0;
    if (value > (NO_LIMIT >> shift)) return 0;
    *bytes = value << shift;
    return 1;
}

/* A percentage in (0, 100]; `text` may be the environment's, so it is not modified. */
static int parse_percentage(const char *text, double *out) {
    char *end = NULL;
    double value = strtod(text, &end);
    if (end == text) return 0;
    while (isspace((unsigned char)*end)) end++;
    if (*end != '\0' || !(value > 0.0 && value <= 100.0)) return 0;
    *out = value;
    return 1;
}

/* Whether `id` names device `d`: its ordinal, or its UUID as `GPU-xxxxxxxx-xxxx-...`. */
static int identifies(const char *id, CUdevice d) {
    if (isdigit((unsigned char)*id)) {
        char *end = NULL;
        long ordinal = strtol(id, &end, 10);
        return *end == '\0' && ordinal == d;
    }
    const struct fake_device *dev = &cfg.dev[d];
    if (!dev->has_uuid) return 0;
    const unsigned char *u = dev->uuid;
    char uuid[48];
    snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    return strcasecmp(id, uuid) == 0;
}

static int daemon_listens(const char *pipe) {
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(address.sun_path, sizeof address.sun_path, "%s/control", pipe) >= sizeof address.sun_path) return 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int ok = connect(fd, (struct sockaddr *)&address, sizeof address) == 0;
    close(fd);
    return ok;
}

/* The daemon's defaults in force when this client connected (fake-mps-state). */
static void read_daemon_defaults(const char *pipe, unsigned long long *limit, double *percentage) {
    char path[4096];
    snprintf(path, sizeof path, "%s/fake-mps-state", pipe);
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    char line[1024];
    while (fgets(line, sizeof line, f) != NULL) {
        char key[64], id[256], value[64];
        int n = sscanf(line, "%63s %255s %63s", key, id, value);
        if (n == 2 && strcmp(key, "default_active_thread_percentage") == 0) {
            parse_percentage(id, percentage);
        } else if (n == 3 && strcmp(key, "default_device_pinned_mem_limit") == 0) {
            unsigned long long bytes;
            if (!parse_limit(value, &bytes)) continue;
            for (int d = 0; d < cfg.ndev; d++)
                if (identifies(id, d)) limit[d] = bytes; /* the line set last wins */
        }
    }
    fclose(f);
}

/* The client's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, lowering `limit` where it names a device. */
static void apply_client_limits(unsigned long long *limit) {
    const char *env = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    if (env == NULL) return;
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", env);
    for (char *save = NULL, *entry = strtok_r(copy, ",", &save); entry != NULL; entry = strtok_r(NULL, ",", &save)) {
        char *equals = strchr(entry, '=');
        unsigned long long bytes;
        if (equals == NULL) continue;
        *equals = '\0';
        if (!parse_limit(trim(equals + 1), &bytes)) continue;
        for (int d = 0; d < cfg.ndev; d++)
            if (identifies(trim(entry), d) && bytes < limit[d]) limit[d] = bytes;
    }
}

static void mps_resolve(void) {
    if (mps.resolved) return;
    mps.resolved = 1;
    mps.percentage = 100.0;
    for (int d = 0; d < MAX_DEVICES; d++) mps.limit[d] = NO_LIMIT;
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    if (pipe == NULL || *pipe == '\0') return;
    mps.active = 1;
    mps.connected = daemon_listens(pipe);
    if (cfg.mps_ignore) return;
    if (mps.connected) read_daemon_defaults(pipe, mps.limit, &mps.percentage);
    apply_client_limits(mps.limit);
    const char *pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    double client;
    if (pct != NULL && parse_percentage(pct, &client) && client < mps.percentage) mps.percentage = client;
}

/* A context call under MPS needs the daemon. */
static CUresult mps_connect(void) {
    mps_resolve();
    return mps.active && !mps.connected ? CUDA_ERROR_MPS_CONNECTION_FAILED : CUDA_SUCCESS;
}

/* The multiprocessors an MPS client sees: whole groups of `mps_sm_granularity` SMs (a TPC
 * holds 2), rounded down, at least one group. Both measurements on a 132-SM H100 fit whole
 * TPCs: 25 % of 66 TPCs = 16.5 -> 16 TPCs = 32 SMs (measured 32), 10 % -> 6 TPCs = 12
 * (measured 12); rounding SMs down would give 33 and 13. */
static int mps_multiprocessors(int count) {
    mps_resolve();
    if (!mps.active || cfg.mps_ignore || mps.percentage >= 100.0) return count;
    int group = cfg.mps_sm_granularity;
    int kept = (int)((double)(count / group) * mps.percentage / 100.0) * group;
    if (kept < 1) kept = count < group ? count : group;
    return kept;
}

/* ---- Contexts and memory ------------------------------------------------------------------ */

struct CUctx_st {
    CUdevice device;
};

static struct CUctx_st primary[MAX_DEVICES];
static int primary_refs[MAX_DEVICES];
static unsigned long long used[MAX_DEVICES];
static __thread CUcontext current;

static struct allocation {
    CUdeviceptr ptr;
    unsigned long long size;
    CUdevice device;
} *allocations;
static size_t nallocations, allocations_cap;
/* Fake device addresses, never dereferenced; 2 MiB apart like the driver's large pages. */
static CUdeviceptr next_ptr = 0x7f0000000000ULL;

/* What a process may use on device d: its memory, or under MPS the lower limit. */
static unsigned long long capacity(CUdevice d) {
    mps_resolve();
    unsigned long long total = cfg.dev[d].total_mem;
    return mps.limit[d] < total ? mps.limit[d] : total;
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
    /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: an MPS client sees its share. */
    *v = attrib == 16 ? mps_multiprocessors(dev->attr[attrib]) : dev->attr[attrib];
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

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) {
    ENTER("cuDevicePrimaryCtxRetain");
    if (device(d) == NULL) return CUDA_ERROR_INVALID_DEVICE;
    if (ctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult connected = mps_connect();
    if (connected != CUDA_SUCCESS) return connected;
    if (primary_refs[d] == 0) {
        /* An MPS limit counts the context's own memory: below it, no context. */
        if (cfg.context_overhead > capacity(d)) return CUDA_ERROR_OUT_OF_MEMORY;
        used[d] = cfg.context_overhead;
        primary[d].device = d;
    }
    primary_refs[d]++;
    *ctx = &primary[d];
    return CUDA_SUCCESS;
}

static CUresult primary_release(const char *function, CUdevice d) {
    ENTER(function);
    if (device(d) == NULL) return CUDA_ERROR_INVALID_DEVICE;
    if (primary_refs[d] == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--primary_refs[d] > 0) return CUDA_SUCCESS;
    /* The context goes, and everything allocated in it. */
    size_t kept = 0;
    for (size_t i = 0; i < nallocations; i++)
        if (allocations[i].device != d) allocations[kept++] = allocations[i];
    nallocations = kept;
    used[d] = 0;
    if (current == &primary[d]) current = NULL;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return primary_release("cuDevicePrimaryCtxRelease", d); }

/* CUDA 11.0 */
#if !defined(FAKE_CUDA_LEGACY_10_2) && !defined(FAKE_CUDA_LEGACY_9_0)
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return primary_release("cuDevicePrimaryCtxRelease_v2", d); }
#endif

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    ENTER("cuCtxSetCurrent");
    if (ctx == NULL) {
        current = NULL;
        return CUDA_SUCCESS;
    }
    CUresult connected = mps_connect();
    if (connected != CUDA_SUCCESS) return connected;
    for (int d = 0; d < MAX_DEVICES; d++) {
        if (ctx == &primary[d] && primary_refs[d] > 0) {
            current = ctx;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
    ENTER("cuMemAlloc_v2");
    if (current == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    if (ptr == NULL || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    CUdevice d = current->device;
    unsigned long long limit = capacity(d);
    if (bytes > limit || used[d] > limit - bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    if (nallocations == allocations_cap) {
        size_t cap = allocations_cap ? 2 * allocations_cap : 64;
        struct allocation *grown = realloc(allocations, cap * sizeof *grown);
        if (grown == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
        allocations = grown;
        allocations_cap = cap;
    }
    const unsigned long long page = 2ULL << 20;
    allocations[nallocations++] = (struct allocation){next_ptr, bytes, d};
    *ptr = next_ptr;
    next_ptr += (bytes + page - 1) / page * page;
    used[d] += bytes;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
    ENTER("cuMemFree_v2");
    if (current == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    for (size_t i = 0; i < nallocations; i++) {
        if (allocations[i].ptr == ptr) {
            used[allocations[i].device] -= allocations[i].size;
            allocations[i] = allocations[--nallocations];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    ENTER("cuMemGetInfo_v2");
    if (current == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    if (free_bytes == NULL || total_bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUdevice d = current->device;
    unsigned long long limit = capacity(d);
    /* Under MPS the total stays the whole GPU; free is what the limit leaves. */
    *total_bytes = (size_t)cfg.dev[d].total_mem;
    *free_bytes = (size_t)(limit > used[d] ? limit - used[d] : 0);
    return CUDA_SUCCESS;
}

static const struct {
    int code;
    const char *name;
    const char *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {805, "CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS client failed to connect to the MPS control daemon or the MPS server"},
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
