//! Error codes and the words deviceQuery prints for them.
//!
//! deviceQuery is a runtime-API program: on a failed device count it prints the `cudaError_t`
//! code and `cudaGetErrorString` text. For the failures a driver-API probe can meet, the runtime
//! codes equal the driver's `CUresult` codes, and the texts below are the runtime's. Code 35
//! (insufficient driver) exists only in the runtime: it is what deviceQuery prints when libcuda
//! cannot be loaded or is too old, so devicequery prints it for those cases too.

/// `cudaErrorInsufficientDriver`: no usable libcuda.
pub const INSUFFICIENT_DRIVER: i32 = 35;
pub const STUB_LIBRARY: i32 = 34;
pub const NO_DEVICE: i32 = 100;
/// What an allocation beyond the memory the process may use returns (also under an MPS limit).
pub const OUT_OF_MEMORY: i32 = 2;
pub const INVALID_CONTEXT: i32 = 201;
/// CUDA_MPS_PIPE_DIRECTORY is set but no MPS control daemon answers there.
pub const MPS_CONNECTION_FAILED: i32 = 805;

/// (code, driver `CUresult` name, runtime `cudaGetErrorString` text)
const KNOWN: [(i32, Option<&str>, &str); 17] = [
    (1, Some("CUDA_ERROR_INVALID_VALUE"), "invalid argument"),
    (
        OUT_OF_MEMORY,
        Some("CUDA_ERROR_OUT_OF_MEMORY"),
        "out of memory",
    ),
    (
        3,
        Some("CUDA_ERROR_NOT_INITIALIZED"),
        "initialization error",
    ),
    (4, Some("CUDA_ERROR_DEINITIALIZED"), "driver shutting down"),
    (
        STUB_LIBRARY,
        Some("CUDA_ERROR_STUB_LIBRARY"),
        "CUDA driver is a stub library",
    ),
    (
        INSUFFICIENT_DRIVER,
        None,
        "CUDA driver version is insufficient for CUDA runtime version",
    ),
    (
        46,
        Some("CUDA_ERROR_DEVICE_UNAVAILABLE"),
        "CUDA-capable device(s) is/are busy or unavailable",
    ),
    (
        NO_DEVICE,
        Some("CUDA_ERROR_NO_DEVICE"),
        "no CUDA-capable device is detected",
    ),
    (
        101,
        Some("CUDA_ERROR_INVALID_DEVICE"),
        "invalid device ordinal",
    ),
    (
        INVALID_CONTEXT,
        Some("CUDA_ERROR_INVALID_CONTEXT"),
        "invalid device context",
    ),
    (
        304,
        Some("CUDA_ERROR_OPERATING_SYSTEM"),
        "OS call failed or operation not supported on this OS",
    ),
    (
        801,
        Some("CUDA_ERROR_NOT_SUPPORTED"),
        "operation not supported",
    ),
    (
        802,
        Some("CUDA_ERROR_SYSTEM_NOT_READY"),
        "system not yet initialized",
    ),
    (
        803,
        Some("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
        "system has unsupported display driver / cuda driver combination",
    ),
    (
        804,
        Some("CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
        "forward compatibility was attempted on non supported HW",
    ),
    (
        MPS_CONNECTION_FAILED,
        Some("CUDA_ERROR_MPS_CONNECTION_FAILED"),
        "MPS client failed to connect to the MPS control daemon or the MPS server",
    ),
    (999, Some("CUDA_ERROR_UNKNOWN"), "unknown error"),
];

/// The runtime's text for `code`, when it is one devicequery knows.
pub fn runtime_message(code: i32) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, _, text)| *text)
}

/// The driver's enum name for `code`, when it is one devicequery knows.
pub fn driver_name(code: i32) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|(c, _, _)| *c == code)
        .and_then(|(_, name, _)| *name)
}

/// What cudaGetErrorString says for a code it does not know.
pub const UNRECOGNIZED: &str = "unrecognized error code";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_device_query_prints() {
        assert_eq!(
            runtime_message(35),
            Some("CUDA driver version is insufficient for CUDA runtime version")
        );
        assert_eq!(
            runtime_message(100),
            Some("no CUDA-capable device is detected")
        );
        assert_eq!(runtime_message(34), Some("CUDA driver is a stub library"));
        assert_eq!(runtime_message(802), Some("system not yet initialized"));
        assert_eq!(runtime_message(12345), None);
    }

    #[test]
    fn driver_names() {
        assert_eq!(driver_name(100), Some("CUDA_ERROR_NO_DEVICE"));
        assert_eq!(driver_name(34), Some("CUDA_ERROR_STUB_LIBRARY"));
        assert_eq!(driver_name(35), None); // runtime-only condition
        assert_eq!(driver_name(2), Some("CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(driver_name(805), Some("CUDA_ERROR_MPS_CONNECTION_FAILED"));
    }
}
