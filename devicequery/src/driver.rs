//! Loading the CUDA driver library (libcuda) at run time and calling the few driver-API entry
//! points devicequery needs.
//!
//! Why a small libloading layer and not cudarc: cudarc's current releases pull libloading 0.9,
//! which needs Rust 1.88 (we build with 1.75 for Yocto scarthgap), and cudarc panics when a
//! symbol is missing at first call. A JetPack 4 board ships a CUDA 10.2 driver that lacks newer
//! symbols; it must still get a report, never a crash. So: the CUDA 10.2-era entry points are
//! resolved up front (a missing one is a clear error), anything newer is looked up lazily and
//! its absence only leaves a fact out.

use std::cell::OnceCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt;
use std::mem::ManuallyDrop;

use libloading::Library;

/// `CUresult`: 0 is success, anything else an error code.
pub type CuResult = c_int;
/// `CUdevice`: a device handle (in practice the ordinal).
pub type CuDevice = c_int;

/// Sonames tried in order, by name only so the dynamic loader's search applies
/// (`LD_LIBRARY_PATH`, the ld cache the NVIDIA runtime updates). `libcuda.so.1` first: it is
/// what the driver installs and the container runtime injects; a bare `libcuda.so` is often a
/// development link or the toolkit stub.
pub const SONAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// Why the driver could not be used at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No soname could be opened: (soname, dynamic loader message) for each attempt.
    NotLoadable(Vec<(String, String)>),
    /// The library opened but lacks an entry point devicequery requires.
    MissingSymbol {
        library: &'static str,
        symbol: &'static str,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotLoadable(attempts) => {
                // The loader's messages already start with the soname.
                let tried: Vec<&str> = attempts.iter().map(|(_, why)| why.as_str()).collect();
                write!(
                    f,
                    "the CUDA driver library could not be loaded: {}",
                    tried.join("; ")
                )
            }
            LoadError::MissingSymbol { library, symbol } => write!(
                f,
                "{library} does not export {symbol}, which every CUDA 10.2 or newer driver has: \
                 the driver is too old or the library is not NVIDIA's CUDA driver"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// The required (CUDA 10.2-era) entry points.
struct RequiredApi {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    driver_get_version: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    device_total_mem: unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    device_can_access_peer: unsafe extern "C" fn(*mut c_int, CuDevice, CuDevice) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

/// `cuDeviceGetUuid(_v2)(CUuuid *uuid, CUdevice dev)`; `CUuuid` is 16 bytes.
type GetUuidFn = unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult;

/// `CUcontext`: an opaque pointer.
pub type CuContext = *mut c_void;
/// `CUdeviceptr` on 64-bit targets (`unsigned long long`).
pub type CuDevicePtr = u64;

/// Context and memory entry points, resolved only for the allocation checks
/// (`--check-limits`, `--allocate-mib`): the plain report must not depend on them. All are in
/// the CUDA 10.2 driver; `cuDevicePrimaryCtxRelease_v2` (CUDA 11.0) is preferred when present.
struct MemoryApi {
    primary_ctx_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    primary_ctx_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult,
}

/// A loaded CUDA driver library.
pub struct Driver {
    soname: &'static str,
    api: RequiredApi,
    get_uuid: OnceCell<Option<GetUuidFn>>,
    memory: OnceCell<Result<MemoryApi, LoadError>>,
    /// Never unloaded: the real driver starts threads and registers exit handlers, unloading it
    /// before exit is fragile, and the process ends right after the report anyway.
    library: ManuallyDrop<Library>,
}

/// Copies a function pointer out of the library (the library outlives it: see [`Driver`]).
///
/// # Safety
/// `T` must be the C signature of `symbol`.
unsafe fn required<T: Copy>(
    library: &Library,
    soname: &'static str,
    symbol: &'static str,
) -> Result<T, LoadError> {
    library
        .get::<T>(symbol.as_bytes())
        .map(|s| *s)
        .map_err(|_| LoadError::MissingSymbol {
            library: soname,
            symbol,
        })
}

impl Driver {
    /// Opens the first loadable soname of [`SONAMES`] and resolves the required entry points.
    pub fn load() -> Result<Driver, LoadError> {
        let mut attempts = Vec::new();
        for soname in SONAMES {
            // SAFETY: loading libcuda runs its initialisers; that is what every CUDA program does.
            match unsafe { Library::new(soname) } {
                Ok(library) => return Driver::from_library(library, soname),
                Err(e) => attempts.push((soname.to_string(), loader_message(&e))),
            }
        }
        Err(LoadError::NotLoadable(attempts))
    }

    fn from_library(library: Library, soname: &'static str) -> Result<Driver, LoadError> {
        // SAFETY: each signature below is the one in NVIDIA's cuda.h.
        let api = unsafe {
            RequiredApi {
                init: required(&library, soname, "cuInit")?,
                driver_get_version: required(&library, soname, "cuDriverGetVersion")?,
                device_get_count: required(&library, soname, "cuDeviceGetCount")?,
                device_get: required(&library, soname, "cuDeviceGet")?,
                device_get_name: required(&library, soname, "cuDeviceGetName")?,
                device_total_mem: required(&library, soname, "cuDeviceTotalMem_v2")?,
                device_get_attribute: required(&library, soname, "cuDeviceGetAttribute")?,
                device_can_access_peer: required(&library, soname, "cuDeviceCanAccessPeer")?,
                get_error_name: required(&library, soname, "cuGetErrorName")?,
                get_error_string: required(&library, soname, "cuGetErrorString")?,
            }
        };
        Ok(Driver {
            soname,
            api,
            get_uuid: OnceCell::new(),
            memory: OnceCell::new(),
            library: ManuallyDrop::new(library),
        })
    }

    /// The soname that was opened (`libcuda.so.1` or `libcuda.so`).
    pub fn soname(&self) -> &'static str {
        self.soname
    }

    pub fn init(&self) -> Result<(), CuResult> {
        // SAFETY: plain value argument.
        check(unsafe { (self.api.init)(0) })
    }

    /// The driver's CUDA version as an integer, e.g. 12040 for 12.4.
    pub fn driver_version(&self) -> Result<i32, CuResult> {
        let mut version = 0;
        // SAFETY: valid out pointer.
        check(unsafe { (self.api.driver_get_version)(&mut version) })?;
        Ok(version)
    }

    pub fn device_count(&self) -> Result<i32, CuResult> {
        let mut count = 0;
        // SAFETY: valid out pointer.
        check(unsafe { (self.api.device_get_count)(&mut count) })?;
        Ok(count)
    }

    pub fn device(&self, ordinal: i32) -> Result<CuDevice, CuResult> {
        let mut device = 0;
        // SAFETY: valid out pointer.
        check(unsafe { (self.api.device_get)(&mut device, ordinal) })?;
        Ok(device)
    }

    pub fn name(&self, device: CuDevice) -> Result<String, CuResult> {
        // 256 bytes, like cudaDeviceProp::name.
        let mut buffer = [0 as c_char; 256];
        // SAFETY: the length passed is the buffer's; the driver NUL-terminates within it.
        check(unsafe {
            (self.api.device_get_name)(buffer.as_mut_ptr(), buffer.len() as c_int, device)
        })?;
        let last = buffer.len() - 1;
        // Never trust a foreign library with termination.
        buffer[last] = 0;
        // SAFETY: NUL-terminated above at the latest.
        Ok(unsafe { CStr::from_ptr(buffer.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    pub fn total_mem(&self, device: CuDevice) -> Result<u64, CuResult> {
        let mut bytes = 0usize;
        // SAFETY: valid out pointer of the C type size_t.
        check(unsafe { (self.api.device_total_mem)(&mut bytes, device) })?;
        Ok(bytes as u64)
    }

    pub fn attribute(&self, device: CuDevice, attribute: i32) -> Result<i32, CuResult> {
        let mut value = 0;
        // SAFETY: valid out pointer.
        check(unsafe { (self.api.device_get_attribute)(&mut value, attribute, device) })?;
        Ok(value)
    }

    pub fn can_access_peer(&self, device: CuDevice, peer: CuDevice) -> Result<bool, CuResult> {
        let mut can = 0;
        // SAFETY: valid out pointer.
        check(unsafe { (self.api.device_can_access_peer)(&mut can, device, peer) })?;
        Ok(can != 0)
    }

    /// The driver's enum name for `code` (e.g. `CUDA_ERROR_NO_DEVICE`), if it knows one.
    pub fn error_name(&self, code: CuResult) -> Option<String> {
        self.error_text(self.api.get_error_name, code)
    }

    /// The driver's description of `code`, if it knows one.
    pub fn error_string(&self, code: CuResult) -> Option<String> {
        self.error_text(self.api.get_error_string, code)
    }

    fn error_text(
        &self,
        function: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
        code: CuResult,
    ) -> Option<String> {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: valid out pointer; the driver returns a static string or fails.
        let status = unsafe { function(code, &mut text) };
        if status != 0 || text.is_null() {
            return None;
        }
        // SAFETY: checked non-null; static NUL-terminated string owned by the driver.
        Some(
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// The device UUID through `cuDeviceGetUuid_v2` (CUDA 11.4+) or `cuDeviceGetUuid` (9.2+);
    /// `None` when the driver has neither or the call fails: it is optional information.
    pub fn uuid(&self, device: CuDevice) -> Option<[u8; 16]> {
        let function = self.get_uuid.get_or_init(|| {
            ["cuDeviceGetUuid_v2", "cuDeviceGetUuid"]
                .iter()
                .find_map(|symbol| {
                    // SAFETY: both have the signature of GetUuidFn.
                    unsafe { self.library.get::<GetUuidFn>(symbol.as_bytes()) }
                        .ok()
                        .map(|s| *s)
                })
        });
        let function = (*function)?;
        let mut uuid = [0u8; 16];
        // SAFETY: 16-byte out buffer, the size of CUuuid.
        let status = unsafe { function(&mut uuid, device) };
        (status == 0).then_some(uuid)
    }
}

impl Driver {
    fn memory_api(&self) -> Result<&MemoryApi, LoadError> {
        self.memory
            .get_or_init(|| {
                let (library, soname) = (&*self.library, self.soname);
                // SAFETY: each signature is the one in NVIDIA's cuda.h (`cuMemAlloc` and friends
                // are macros for the `_v2` symbols since CUDA 3.2).
                unsafe {
                    let release = match library.get(b"cuDevicePrimaryCtxRelease_v2") {
                        Ok(symbol) => *symbol,
                        Err(_) => required(library, soname, "cuDevicePrimaryCtxRelease")?,
                    };
                    Ok(MemoryApi {
                        primary_ctx_retain: required(library, soname, "cuDevicePrimaryCtxRetain")?,
                        primary_ctx_release: release,
                        ctx_set_current: required(library, soname, "cuCtxSetCurrent")?,
                        mem_alloc: required(library, soname, "cuMemAlloc_v2")?,
                        mem_free: required(library, soname, "cuMemFree_v2")?,
                        mem_get_info: required(library, soname, "cuMemGetInfo_v2")?,
                    })
                }
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Retains `device`'s primary context (the one the CUDA runtime uses) and makes it
    /// current. Under MPS this is where the client connects to the daemon.
    pub fn retain_primary_context(
        &self,
        device: CuDevice,
    ) -> Result<PrimaryContext<'_>, ContextError> {
        let api = self.memory_api().map_err(ContextError::Load)?;
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        check(unsafe { (api.primary_ctx_retain)(&mut context, device) }).map_err(|code| {
            ContextError::Call {
                call: "cuDevicePrimaryCtxRetain",
                code,
            }
        })?;
        // SAFETY: a context the driver just returned.
        if let Err(code) = check(unsafe { (api.ctx_set_current)(context) }) {
            // SAFETY: balances the retain above.
            unsafe { (api.primary_ctx_release)(device) };
            return Err(ContextError::Call {
                call: "cuCtxSetCurrent",
                code,
            });
        }
        Ok(PrimaryContext { api, device })
    }
}

/// Why a primary context could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextError {
    /// An entry point is missing.
    Load(LoadError),
    /// The named call failed with `code`.
    Call { call: &'static str, code: CuResult },
}

/// A retained, current primary context; [`PrimaryContext::release`] gives it back (dropping it
/// without does too, ignoring the result).
pub struct PrimaryContext<'d> {
    api: &'d MemoryApi,
    device: CuDevice,
}

impl PrimaryContext<'_> {
    /// `cuMemGetInfo_v2`: (free, total) bytes as the driver reports them to this process.
    pub fn memory_info(&self) -> Result<(u64, u64), CuResult> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out pointers of the C type size_t.
        check(unsafe { (self.api.mem_get_info)(&mut free, &mut total) })?;
        Ok((free as u64, total as u64))
    }

    /// `cuMemAlloc_v2` of `bytes` in this context.
    pub fn alloc(&self, bytes: u64) -> Result<CuDevicePtr, CuResult> {
        let size = usize::try_from(bytes).map_err(|_| 1)?; // CUDA_ERROR_INVALID_VALUE
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: valid out pointer; the size is a plain value.
        check(unsafe { (self.api.mem_alloc)(&mut ptr, size) })?;
        Ok(ptr)
    }

    /// `cuMemFree_v2` of a pointer [`PrimaryContext::alloc`] returned.
    pub fn free(&self, ptr: CuDevicePtr) -> Result<(), CuResult> {
        // SAFETY: a device pointer, never dereferenced on the host; a stale one is an error
        // code, not undefined behaviour, in the driver API.
        check(unsafe { (self.api.mem_free)(ptr) })
    }

    /// `cuDevicePrimaryCtxRelease(_v2)`.
    pub fn release(self) -> Result<(), CuResult> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: balances the retain of this context.
        check(unsafe { (this.api.primary_ctx_release)(this.device) })
    }
}

impl Drop for PrimaryContext<'_> {
    fn drop(&mut self) {
        // SAFETY: balances the retain; the process is about to report and exit anyway, so a
        // failure has nobody to tell.
        unsafe { (self.api.primary_ctx_release)(self.device) };
    }
}

fn check(status: CuResult) -> Result<(), CuResult> {
    if status == 0 {
        Ok(())
    } else {
        Err(status)
    }
}

/// The dynamic loader's own words (e.g. "libcuda.so.1: cannot open shared object file: No such
/// file or directory", or a missing GLIBC version): libloading displays dlerror() verbatim.
fn loader_message(error: &libloading::Error) -> String {
    error.to_string()
}
