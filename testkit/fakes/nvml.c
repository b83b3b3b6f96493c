/*
 * A fake libnvidia-ml.so.1 with NVML's real C ABI, for the device plugin's tests.
 *
 * Configured per copy, without environment variables (tests share a process): a test copies
 * this library into a fake host root and writes, in the same directory,
 *   fake-nvml.conf   one GPU per line: uuid|name|memory_bytes|pci_bus_id|numa_node|minor
 *                    [|unsupported] (memory 0, bus id "-", numa -1 = NVML_ERROR_NOT_SUPPORTED;
 *                    `unsupported` is a comma list of queries that answer NOT_SUPPORTED, as a
 *                    Jetson driver does: memory, pci, numa, minor, utilization, temperature,
 *                    power, clocks, events, mig), and optional lines
 *                    "init_error=<nvmlReturn_t>" / "driver_version=<text>".
 * and, while running,
 *   mig.conf         MIG state, re-read whenever it is replaced or modified (a MIG
 *                    reconfiguration): "mode <gpu index> <0|1>" lines and one line per MIG
 *                    device "device <gpu index>|<uuid>|<gi>|<ci>|<gi slices>|<ci slices>|
 *                    <memory MiB>|<profile>[|<GPU instance profile id>]". The profile id is
 *                    the one `nvidia-smi mig -lgip` lists (A100/H100: 19 = 1g, 20 = 1g+me,
 *                    15 = 1g with twice the memory, 14 = 2g, 9 = 3g, 5 = 4g, 0 = 7g); without
 *                    it, the plain profile of <gi slices>. "slot <gpu index> <slot>
 *                    <nvmlReturn_t>" makes that MIG device slot answer the error (the devices
 *                    fill the other slots in order). GPUs without "unsupported=mig" are
 *                    MIG-capable; their GPU instance profiles are the A100/H100 table below.
 *   xid-events       lines "<gpu index> <xid> [<gi> <ci>]": consumed (deleted) by
 *                    nvmlEventSetWait, which reports them one by one as critical XID events
 *                    (with the GPU/compute instance ids when given, as for a MIG device).
 *   lost-<index>     while present, that GPU (and its MIG devices) answer
 *                    NVML_ERROR_GPU_IS_LOST.
 *   telemetry-<index> (a GPU) or telemetry-<MIG uuid> (a MIG device): lines "<key>=<value>",
 *                    read on every query: gpu_util, mem_util (%), sm_clock, mem_clock (MHz),
 *                    temp (C), power_mw, mem_used (bytes). A key that is absent makes its
 *                    query answer NVML_ERROR_NOT_SUPPORTED (memory: used is 1 % of the total
 *                    when mem_used is absent), and so does a query the board's `unsupported`
 *                    list names, whatever the file says. As the real NVML: utilisation of a
 *                    MIG-enabled GPU, and utilisation, clocks, temperature and power of a MIG
 *                    device, answer NOT_SUPPORTED (those are the whole GPU's).
 *   processes-<index> (a GPU) or processes-<MIG uuid> (a MIG device): lines "<pid> <bytes>",
 *                    read on every nvmlDeviceGetComputeRunningProcesses_v3: the processes with
 *                    a compute context and the memory each uses ("-" for bytes answers
 *                    NVML_VALUE_NOT_AVAILABLE). No file: no process. A board whose
 *                    `unsupported` list names "processes" answers NOT_SUPPORTED. A MIG device's
 *                    processes carry its GPU and compute instance ids, a GPU's 0xFFFFFFFF.
 *   compute-mode-<index>  the GPU's compute mode as nvmlDeviceSetComputeMode last set it
 *                    (NVML's enum: 0 default, 2 prohibited, 3 exclusive process), read by
 *                    nvmlDeviceGetComputeMode; no file: 0. A board whose `unsupported` list
 *                    names "compute_mode" answers NOT_SUPPORTED to both (Tegra cannot change
 *                    compute modes).
 *   The config's "cuda_driver_version=<int>" (e.g. 12040) is what
 *   nvmlSystemGetCudaDriverVersion_v2 answers, its "compute_capability=<major>.<minor>" what
 *   nvmlDeviceGetCudaComputeCapability answers for every GPU (NOT_SUPPORTED when absent).
 * The library finds its own directory with dladdr(), so every copy (every root) is separate:
 * glibc loads one copy per file, and the copies are different files.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_UNKNOWN 999

#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
#define MAX_GPUS 16
#define MAX_MIGS 64
/* MIG devices a MIG-capable GPU can hold at most (A100/H100: 7). */
#define MAX_MIG_PER_GPU 7
#define NO_ID 0xFFFFFFFFu

struct fake_gpu {
    char uuid[96];
    char name[128];
    unsigned long long memory;
    char bus_id[32];
    int numa;
    unsigned int minor;
    unsigned int index;
    char unsupported[160];
    int mig_enabled;
    /* MIG devices only: the parent GPU, instance ids, slices, GPU instance profile id. */
    struct fake_gpu *parent;
    unsigned int gi, ci, gi_slices, ci_slices, profile_id;
};

/* GPU instance profiles of the A100 and H100 as NVML lists them: the index is the
 * NVML_GPU_INSTANCE_PROFILE_* constant nvmlDeviceGetGpuInstanceProfileInfo takes, `id` the
 * profile id nvidia-smi mig -lgip prints and nvmlGpuInstanceGetInfo reports. The media
 * engines are the H100's (NVIDIA MIG user guide, "Supported MIG Profiles"): +me adds the OFA.
 * Every other profile constant answers NOT_SUPPORTED, as on these GPUs. */
struct gi_profile {
    unsigned int profile, id, slices, decoders, jpegs, ofas;
};
static const struct gi_profile gi_profiles[] = {
    {0, 19, 1, 1, 1, 0}, /* NVML_GPU_INSTANCE_PROFILE_1_SLICE: 1g.10gb */
    {1, 14, 2, 2, 2, 0}, /* 2_SLICE: 2g.20gb */
    {2, 9, 3, 3, 3, 0},  /* 3_SLICE: 3g.40gb */
    {3, 5, 4, 4, 4, 0},  /* 4_SLICE: 4g.40gb */
    {4, 0, 7, 7, 7, 1},  /* 7_SLICE: 7g.80gb */
    {7, 20, 1, 1, 1, 1}, /* 1_SLICE_REV1: 1g.10gb+me */
    {9, 15, 1, 1, 1, 0}, /* 1_SLICE_REV2: 1g.20gb */
};
#define GI_PROFILE_COUNT 17 /* NVML_GPU_INSTANCE_PROFILE_COUNT */

static const struct gi_profile *gi_profile_by_id(unsigned int id)
{
    for (size_t i = 0; i < sizeof gi_profiles / sizeof gi_profiles[0]; i++)
        if (gi_profiles[i].id == id)
            return &gi_profiles[i];
    return NULL;
}

/* The plain profile's id for a slice count (the default of a device line). */
static unsigned int plain_profile_id(unsigned int slices)
{
    for (size_t i = 0; i < sizeof gi_profiles / sizeof gi_profiles[0]; i++)
        if (gi_profiles[i].profile <= 4 && gi_profiles[i].slices == slices)
            return gi_profiles[i].id;
    return 19;
}
typedef struct fake_gpu *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

struct fake_set {
    unsigned long long mask[MAX_GPUS];
};
typedef struct fake_set *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

static struct fake_gpu gpus[MAX_GPUS];
static unsigned int gpu_count;
static struct fake_gpu migs[MAX_MIGS];
static unsigned int mig_count;
/* Error answered by MIG device slot [gpu][slot] (0 = none). */
static nvmlReturn_t slot_error[MAX_GPUS][MAX_MIG_PER_GPU];
/* Identity of the mig.conf last read: inode and modification time. The inode matters: the
 * testkit publishes each version by rename, and two versions written within one tick of the
 * kernel's coarse clock carry the same mtime. */
static long long mig_conf_mtime = -1;
static unsigned long long mig_conf_ino;
static int initialised;
static nvmlReturn_t init_error;
static char driver_version[80] = "550.54.15";
static int cuda_driver_version = -1;
static int cc_major = -1, cc_minor = -1;
static char dir[4096];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Pending XID events read from xid-events: (index, xid, gi, ci). */
static unsigned int pending_index[64];
static unsigned long long pending_xid[64];
static unsigned int pending_gi[64], pending_ci[64];
static unsigned int pending_count;

/* Bounded copy that always terminates (snprintf("%s") trips -Wformat-truncation). */
static void set_str(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static void find_dir(void)
{
    Dl_info info;
    if (dladdr((void *)&find_dir, &info) && info.dli_fname) {
        set_str(dir, sizeof dir, info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            set_str(dir, sizeof dir, ".");
    } else {
        set_str(dir, sizeof dir, ".");
    }
}

static void load_config(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/fake-nvml.conf", dir);
    FILE *f = fopen(path, "r");
    gpu_count = 0;
    init_error = NVML_SUCCESS;
    cuda_driver_version = -1;
    cc_major = cc_minor = -1;
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == 0 || line[0] == '#')
            continue;
        if (strncmp(line, "init_error=", 11) == 0) {
            init_error = atoi(line + 11);
            continue;
        }
        if (strncmp(line, "driver_version=", 15) == 0) {
            set_str(driver_version, sizeof driver_version, line + 15);
            continue;
        }
        if (strncmp(line, "cuda_driver_version=", 20) == 0) {
            cuda_driver_version = atoi(line + 20);
            continue;
        }
        if (strncmp(line, "compute_capability=", 19) == 0) {
            if (sscanf(line + 19, "%d.%d", &cc_major, &cc_minor) != 2)
                cc_major = cc_minor = -1;
            continue;
        }
        if (gpu_count == MAX_GPUS)
            break;
        struct fake_gpu *g = &gpus[gpu_count];
        char *fields[7] = {0};
        char *save = NULL;
        char *tok = strtok_r(line, "|", &save);
        for (int i = 0; i < 7 && tok; i++) {
            fields[i] = tok;
            tok = strtok_r(NULL, "|", &save);
        }
        if (!fields[5])
            continue;
        memset(g, 0, sizeof *g);
        set_str(g->unsupported, sizeof g->unsupported, fields[6] ? fields[6] : "");
        set_str(g->uuid, sizeof g->uuid, fields[0]);
        set_str(g->name, sizeof g->name, fields[1]);
        g->memory = strtoull(fields[2], NULL, 10);
        set_str(g->bus_id, sizeof g->bus_id, fields[3]);
        g->numa = atoi(fields[4]);
        g->minor = (unsigned int)strtoul(fields[5], NULL, 10);
        g->index = gpu_count;
        gpu_count++;
    }
    fclose(f);
}

/* Whether `what` is in the GPU's (or its parent's) comma list of unsupported queries. */
static int unsupported(const struct fake_gpu *g, const char *what)
{
    if (g->parent)
        g = g->parent;
    size_t n = strlen(what);
    for (const char *p = g->unsupported; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, what, n) == 0)
            return 1;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

/* Re-reads mig.conf when it changed (a MIG reconfiguration while the plugin runs). */
static void reload_mig(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/mig.conf", dir);
    struct stat st;
    long long mtime = -2;
    if (stat(path, &st) == 0)
        mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    unsigned long long ino = mtime == -2 ? 0 : (unsigned long long)st.st_ino;
    if (mtime == mig_conf_mtime && ino == mig_conf_ino)
        return;
    mig_conf_mtime = mtime;
    mig_conf_ino = ino;
    mig_count = 0;
    memset(slot_error, 0, sizeof slot_error);
    for (unsigned int i = 0; i < gpu_count; i++)
        gpus[i].mig_enabled = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        unsigned int index, enabled;
        if (sscanf(line, "mode %u %u", &index, &enabled) == 2) {
            if (index < gpu_count)
                gpus[index].mig_enabled = enabled != 0;
            continue;
        }
        unsigned int slot;
        int code;
        if (sscanf(line, "slot %u %u %d", &index, &slot, &code) == 3) {
            if (index < gpu_count && slot < MAX_MIG_PER_GPU)
                slot_error[index][slot] = code;
            continue;
        }
        if (strncmp(line, "device ", 7) != 0 || mig_count == MAX_MIGS)
            continue;
        char *fields[9] = {0};
        char *save = NULL;
        char *tok = strtok_r(line + 7, "|", &save);
        for (int i = 0; i < 9 && tok; i++) {
            fields[i] = tok;
            tok = strtok_r(NULL, "|", &save);
        }
        if (!fields[7])
            continue;
        index = (unsigned int)strtoul(fields[0], NULL, 10);
        if (index >= gpu_count)
            continue;
        struct fake_gpu *m = &migs[mig_count];
        memset(m, 0, sizeof *m);
        m->parent = &gpus[index];
        set_str(m->uuid, sizeof m->uuid, fields[1]);
        m->gi = (unsigned int)strtoul(fields[2], NULL, 10);
        m->ci = (unsigned int)strtoul(fields[3], NULL, 10);
        m->gi_slices = (unsigned int)strtoul(fields[4], NULL, 10);
        m->ci_slices = (unsigned int)strtoul(fields[5], NULL, 10);
        m->memory = strtoull(fields[6], NULL, 10) * 1024ULL * 1024ULL;
        m->profile_id = fields[8] ? (unsigned int)strtoul(fields[8], NULL, 10)
                                  : plain_profile_id(m->gi_slices);
        snprintf(m->name, sizeof m->name, "%s MIG %s", gpus[index].name, fields[7]);
        m->numa = gpus[index].numa;
        m->minor = gpus[index].minor;
        m->index = mig_count;
        mig_count++;
    }
    fclose(f);
}

static int is_lost(const struct fake_gpu *g)
{
    char path[4200];
    if (g->parent)
        g = g->parent;
    snprintf(path, sizeof path, "%s/lost-%u", dir, g->index);
    return access(path, F_OK) == 0;
}

static nvmlReturn_t check(nvmlDevice_t d)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (d >= gpus && d < gpus + gpu_count)
        return NVML_SUCCESS;
    if (d >= migs && d < migs + mig_count)
        return NVML_SUCCESS;
    return NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t check_alive(nvmlDevice_t d)
{
    nvmlReturn_t r = check(d);
    if (r != NVML_SUCCESS)
        return r;
    return is_lost(d) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

/* The device answers, and `what` is a query it supports. */
static nvmlReturn_t check_query(nvmlDevice_t d, const char *what)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    return unsupported(d, what) ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

/* A whole-GPU query (utilisation, clocks, temperature, power): NOT_SUPPORTED on a MIG device
 * handle, as the real NVML answers. */
static nvmlReturn_t check_device_query(nvmlDevice_t d, const char *what)
{
    nvmlReturn_t r = check_query(d, what);
    if (r == NVML_SUCCESS && d->parent)
        r = NVML_ERROR_NOT_SUPPORTED;
    return r;
}

/* A GPU (not a MIG device) that answers and offers MIG. */
static nvmlReturn_t check_mig_parent(nvmlDevice_t d)
{
    nvmlReturn_t r = check_query(d, "mig");
    if (r == NVML_SUCCESS && d->parent)
        r = NVML_ERROR_NOT_SUPPORTED;
    return r;
}

/* The value of `key` in the device's telemetry file (telemetry-<index> for a GPU,
 * telemetry-<uuid> for a MIG device); 0 when the key (or the file) is absent. */
static int telemetry_value(const struct fake_gpu *g, const char *key, unsigned long long *value)
{
    char path[4400], line[256];
    if (g->parent)
        snprintf(path, sizeof path, "%s/telemetry-%s", dir, g->uuid);
    else
        snprintf(path, sizeof path, "%s/telemetry-%u", dir, g->index);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t len = strlen(key);
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, len) == 0 && line[len] == '=') {
            *value = strtoull(line + len + 1, NULL, 10);
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

static nvmlReturn_t copy_string(char *dst, unsigned int len, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void)
{
    find_dir();
    load_config();
    if (init_error != NVML_SUCCESS)
        return init_error;
    mig_conf_mtime = -1;
    reload_mig();
    initialised++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    initialised--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, driver_version);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < gpu_count; i++) {
        if (strcmp(gpus[i].uuid, uuid) == 0) {
            *device = &gpus[i];
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_lock(&lock);
    reload_mig();
    for (unsigned int i = 0; i < mig_count; i++) {
        if (strcmp(migs[i].uuid, uuid) == 0) {
            *device = &migs[i];
            pthread_mutex_unlock(&lock);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    nvmlReturn_t r = check(d);
    return r != NVML_SUCCESS ? r : copy_string(uuid, length, d->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    nvmlReturn_t r = check_alive(d);
    return r != NVML_SUCCESS ? r : copy_string(name, length, d->name);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{
    nvmlReturn_t r = check(d);
    if (r == NVML_SUCCESS)
        *index = d->index;
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (d->memory == 0 || unsupported(d, "memory"))
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long used = d->memory / 100;
    telemetry_value(d, "mem_used", &used);
    if (used > d->memory)
        used = d->memory;
    memory->total = d->memory;
    memory->used = used;
    memory->free = d->memory - used;
    return NVML_SUCCESS;
}

/* R470 and older drivers have no _v2 (added in R510). */
#ifndef FAKE_NVML_NO_MEMORY_INFO_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (d->memory == 0 || unsupported(d, "memory"))
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long used = d->memory / 100;
    telemetry_value(d, "mem_used", &used);
    if (used > d->memory)
        used = d->memory;
    memory->total = d->memory;
    memory->reserved = 0;
    memory->used = used;
    memory->free = d->memory - used;
    return NVML_SUCCESS;
}
#endif

/* nvmlProcessInfo_t of the _v3 query (nvml.h: nvmlProcessInfo_v2_t). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#define NVML_VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFULL
#define MAX_PROCESSES 64

/* As NVML: *count < the number of processes (or infos NULL with processes to report) answers
 * INSUFFICIENT_SIZE with *count set to the number; otherwise the list and its length. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                    nvmlProcessInfo_t *infos)
{
    nvmlReturn_t r = check_query(d, "processes");
    if (r != NVML_SUCCESS)
        return r;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    char path[4400], line[256];
    if (d->parent)
        snprintf(path, sizeof path, "%s/processes-%s", dir, d->uuid);
    else
        snprintf(path, sizeof path, "%s/processes-%u", dir, d->index);
    nvmlProcessInfo_t found[MAX_PROCESSES];
    unsigned int n = 0;
    FILE *f = fopen(path, "r");
    while (f && n < MAX_PROCESSES && fgets(line, sizeof line, f)) {
        unsigned int pid;
        char bytes[64];
        if (sscanf(line, "%u %63s", &pid, bytes) != 2)
            continue;
        found[n].pid = pid;
        found[n].usedGpuMemory = strcmp(bytes, "-") == 0 ? NVML_VALUE_NOT_AVAILABLE_ULL
                                                          : strtoull(bytes, NULL, 10);
        found[n].gpuInstanceId = d->parent ? d->gi : NO_ID;
        found[n].computeInstanceId = d->parent ? d->ci : NO_ID;
        n++;
    }
    if (f)
        fclose(f);
    if (n > *count || (n > 0 && !infos)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0)
        memcpy(infos, found, n * sizeof found[0]);
    *count = n;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *utilization)
{
    nvmlReturn_t r = check_device_query(d, "utilization");
    if (r != NVML_SUCCESS)
        return r;
    if (d->mig_enabled)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long gpu, mem = 0;
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!telemetry_value(d, "gpu_util", &gpu))
        return NVML_ERROR_NOT_SUPPORTED;
    telemetry_value(d, "mem_util", &mem);
    utilization->gpu = (unsigned int)gpu;
    utilization->memory = (unsigned int)mem;
    return NVML_SUCCESS;
}

/* nvmlClockType_t: 0 graphics, 1 SM, 2 memory, 3 video. */
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *clock)
{
    nvmlReturn_t r = check_device_query(d, "clocks");
    if (r != NVML_SUCCESS)
        return r;
    unsigned long long value;
    const char *key = type == 1 ? "sm_clock" : type == 2 ? "mem_clock" : NULL;
    if (!clock)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!key || !telemetry_value(d, key, &value))
        return NVML_ERROR_NOT_SUPPORTED;
    *clock = (unsigned int)value;
    return NVML_SUCCESS;
}

/* nvmlTemperatureSensors_t: 0 = the GPU die. */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp)
{
    nvmlReturn_t r = check_device_query(d, "temperature");
    if (r != NVML_SUCCESS)
        return r;
    unsigned long long value;
    if (!temp)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sensor != 0 || !telemetry_value(d, "temp", &value))
        return NVML_ERROR_NOT_SUPPORTED;
    *temp = (unsigned int)value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power)
{
    nvmlReturn_t r = check_device_query(d, "power");
    if (r != NVML_SUCCESS)
        return r;
    unsigned long long value;
    if (!power)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!telemetry_value(d, "power_mw", &value))
        return NVML_ERROR_NOT_SUPPORTED;
    *power = (unsigned int)value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (cc_major < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *major = cc_major;
    *minor = cc_minor;
    return NVML_SUCCESS;
}

static void compute_mode_path(nvmlDevice_t d, char *path, size_t size)
{
    snprintf(path, size, "%s/compute-mode-%u", dir, d->index);
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, int *mode)
{
    nvmlReturn_t r = check_device_query(d, "compute_mode");
    if (r != NVML_SUCCESS)
        return r;
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    char path[4200];
    compute_mode_path(d, path, sizeof path);
    *mode = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%d", mode) != 1)
            *mode = 0;
        fclose(f);
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t d, int mode)
{
    nvmlReturn_t r = check_device_query(d, "compute_mode");
    if (r != NVML_SUCCESS)
        return r;
    /* NVML's enum: DEFAULT 0, EXCLUSIVE_THREAD 1 (removed), PROHIBITED 2, EXCLUSIVE_PROCESS 3. */
    if (mode != 0 && mode != 2 && mode != 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    char path[4200];
    compute_mode_path(d, path, sizeof path);
    FILE *f = fopen(path, "w");
    if (!f)
        return NVML_ERROR_UNKNOWN;
    fprintf(f, "%d\n", mode);
    fclose(f);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (cuda_driver_version < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *version = cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (d->parent)
        d = d->parent;
    if (strcmp(d->bus_id, "-") == 0 || unsupported(d, "pci"))
        return NVML_ERROR_NOT_SUPPORTED;
    memset(pci, 0, sizeof *pci);
    unsigned int domain = 0, bus = 0, dev = 0, fn = 0;
    sscanf(d->bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = 0x20b010de;
    pci->pciSubSystemId = 0x134f10de;
    set_str(pci->busId, sizeof pci->busId, d->bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (d->parent || unsupported(d, "minor"))
        return NVML_ERROR_NOT_SUPPORTED;
    *minor = d->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (d->numa < 0 || unsupported(d, "numa"))
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned int)d->numa;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending)
{
    nvmlReturn_t r = check_mig_parent(d);
    if (r != NVML_SUCCESS)
        return r;
    pthread_mutex_lock(&lock);
    reload_mig();
    *current = *pending = (unsigned int)d->mig_enabled;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count)
{
    nvmlReturn_t r = check_mig_parent(d);
    if (r != NVML_SUCCESS)
        return r;
    *count = MAX_MIG_PER_GPU;
    return NVML_SUCCESS;
}

/* The MIG devices of a GPU in mig.conf order; index beyond them: NOT_FOUND (as NVML). */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig)
{
    nvmlReturn_t r = check_mig_parent(d);
    if (r != NVML_SUCCESS)
        return r;
    if (index >= MAX_MIG_PER_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    reload_mig();
    r = NVML_ERROR_NOT_FOUND;
    if (d->mig_enabled && slot_error[d->index][index] != NVML_SUCCESS) {
        r = slot_error[d->index][index];
    } else if (d->mig_enabled) {
        /* The devices fill the slots that answer no error, in order. */
        unsigned int seen = 0, wanted = index;
        for (unsigned int s = 0; s < index; s++)
            if (slot_error[d->index][s] != NVML_SUCCESS)
                wanted--;
        for (unsigned int i = 0; i < mig_count; i++) {
            if (migs[i].parent != d)
                continue;
            if (seen++ == wanted) {
                *mig = &migs[i];
                r = NVML_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig)
{
    nvmlReturn_t r = check(d);
    if (r == NVML_SUCCESS)
        *is_mig = d->parent != NULL;
    return r;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *parent)
{
    nvmlReturn_t r = check(mig);
    if (r != NVML_SUCCESS)
        return r;
    if (!mig->parent)
        return NVML_ERROR_INVALID_ARGUMENT;
    *parent = mig->parent;
    return NVML_SUCCESS;
}

/* An instance id of a MIG device (whole GPUs have none). */
static nvmlReturn_t instance_id(nvmlDevice_t d, int compute, unsigned int *id)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!d->parent)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = compute ? d->ci : d->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id)
{
    return instance_id(d, 0, id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id)
{
    return instance_id(d, 1, id);
}

typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *a)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!a)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(a, 0, sizeof *a);
    a->gpuInstanceSliceCount = d->parent ? d->gi_slices : 7;
    a->computeInstanceSliceCount = d->parent ? d->ci_slices : 7;
    a->multiprocessorCount = 14 * a->computeInstanceSliceCount;
    a->memorySizeMB = d->memory / (1024ULL * 1024ULL);
    /* A MIG device shares its GPU instance's engines. */
    const struct gi_profile *p = d->parent ? gi_profile_by_id(d->profile_id) : NULL;
    if (p) {
        a->sharedCopyEngineCount = p->slices;
        a->sharedDecoderCount = p->decoders;
        a->sharedJpegCount = p->jpegs;
        a->sharedOfaCount = p->ofas;
    }
    return NVML_SUCCESS;
}

/* The GPU instance profiles: nvmlGpuInstanceProfileInfo_t (v1). */
typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    nvmlReturn_t r = check_mig_parent(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!info || profile >= GI_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (size_t i = 0; i < sizeof gi_profiles / sizeof gi_profiles[0]; i++) {
        const struct gi_profile *p = &gi_profiles[i];
        if (p->profile != profile)
            continue;
        memset(info, 0, sizeof *info);
        info->id = p->id;
        info->sliceCount = p->slices;
        info->instanceCount = p->profile == 7 ? 1 : 7 / p->slices;
        info->multiprocessorCount = 16 * p->slices;
        info->copyEngineCount = p->slices;
        info->decoderCount = p->decoders;
        info->jpegCount = p->jpegs;
        info->ofaCount = p->ofas;
        info->memorySizeMB = d->memory / (1024ULL * 1024ULL) / 8 * (p->slices == 7 ? 8 : p->slices);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

/* A GPU instance handle is the (first) MIG device of that instance. */
typedef struct fake_gpu *nvmlGpuInstance_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id, profileId;
    struct {
        unsigned int start, size;
    } placement;
} nvmlGpuInstanceInfo_t;

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *gi)
{
    nvmlReturn_t r = check_mig_parent(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!gi)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    reload_mig();
    r = d->mig_enabled ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; d->mig_enabled && i < mig_count; i++) {
        if (migs[i].parent == d && migs[i].gi == id) {
            *gi = &migs[i];
            r = NVML_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *info)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (!info || !(gi >= migs && gi < migs + mig_count))
        return NVML_ERROR_INVALID_ARGUMENT;
    info->device = gi->parent;
    info->id = gi->gi;
    info->profileId = gi->profile_id;
    info->placement.start = 0;
    info->placement.size = gi->gi_slices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
    nvmlReturn_t r = check_query(d, "events");
    if (r != NVML_SUCCESS)
        return r;
    *types = nvmlEventTypeXidCriticalError;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    *set = calloc(1, sizeof(struct fake_set));
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set)
{
    nvmlReturn_t r = check_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent || unsupported(d, "events") || (types & ~nvmlEventTypeXidCriticalError))
        return NVML_ERROR_NOT_SUPPORTED;
    set->mask[d->index] |= types;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    free(set);
    return NVML_SUCCESS;
}

/* Moves the lines of xid-events into the pending queue (the file is consumed). */
static void read_xid_file(void)
{
    char path[4200], taken[4300];
    snprintf(path, sizeof path, "%s/xid-events", dir);
    snprintf(taken, sizeof taken, "%s/xid-events.taken", dir);
    if (rename(path, taken) != 0)
        return;
    FILE *f = fopen(taken, "r");
    if (f) {
        char line[128];
        while (pending_count < 64 && fgets(line, sizeof line, f)) {
            unsigned int index, gi, ci;
            unsigned long long xid;
            int n = sscanf(line, "%u %llu %u %u", &index, &xid, &gi, &ci);
            if (n < 2)
                continue;
            pending_index[pending_count] = index;
            pending_xid[pending_count] = xid;
            pending_gi[pending_count] = n == 4 ? gi : NO_ID;
            pending_ci[pending_count] = n == 4 ? ci : NO_ID;
            pending_count++;
        }
        fclose(f);
    }
    unlink(taken);
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec step = {0, 10 * 1000 * 1000};
    for (unsigned int waited = 0;; waited += 10) {
        pthread_mutex_lock(&lock);
        read_xid_file();
        while (pending_count > 0) {
            unsigned int index = pending_index[0];
            unsigned long long xid = pending_xid[0];
            unsigned int gi = pending_gi[0], ci = pending_ci[0];
            memmove(pending_index, pending_index + 1, (pending_count - 1) * sizeof pending_index[0]);
            memmove(pending_xid, pending_xid + 1, (pending_count - 1) * sizeof pending_xid[0]);
            memmove(pending_gi, pending_gi + 1, (pending_count - 1) * sizeof pending_gi[0]);
            memmove(pending_ci, pending_ci + 1, (pending_count - 1) * sizeof pending_ci[0]);
            pending_count--;
            if (index < gpu_count && (set->mask[index] & nvmlEventTypeXidCriticalError)) {
                data->device = &gpus[index];
                data->eventType = nvmlEventTypeXidCriticalError;
                data->eventData = xid;
                data->gpuInstanceId = gi;
                data->computeInstanceId = ci;
                pthread_mutex_unlock(&lock);
                return NVML_SUCCESS;
            }
        }
        pthread_mutex_unlock(&lock);
        if (waited >= timeoutms)
            return NVML_ERROR_TIMEOUT;
        nanosleep(&step, NULL);
    }
}
