//! What the backend does on a machine without CUDA: a clear error, never a panic.

use aria_cuda::{cuda_available, CudaBackend, CudaError};

#[test]
fn opening_without_a_driver_is_an_error_naming_the_library() {
    if cuda_available() {
        aria_testing::skip_for_hardware("a CUDA device is present");
        return;
    }
    match CudaBackend::new(0) {
        Err(CudaError::Unavailable { library, .. }) => assert_eq!(library, "libcuda"),
        Err(e) => {
            // A driver without a device (or without cuBLAS) is also an error, not a panic.
            let msg = e.to_string();
            assert!(!msg.is_empty());
        }
        Ok(b) => panic!("opened {b:?} although cuda_available() is false"),
    }
}
