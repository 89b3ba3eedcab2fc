// The entry points of the CUDA backend module (libgt_kernels_cuda.so), the only symbols it exports.
// kernels/backend.cpp loads the module with dlopen on first use and finds these with dlsym, so a
// process that never asks for CUDA never maps the CUDA runtime or cuBLAS.
#pragma once

#include <cstddef>

#include "kernels/backend.hpp"

#define GT_CUDA_EXPORT __attribute__((visibility("default")))

extern "C" {
// Number of visible CUDA devices; 0 when the driver or runtime is missing or fails (never throws).
GT_CUDA_EXPORT int gt_cuda_device_count();
// A new CUDA backend on `device` (0-based), owned by the caller (delete it through Backend*), or
// nullptr with the reason, NUL-terminated, in err[0..err_len). Never throws.
GT_CUDA_EXPORT gossiptrain::kernels::Backend* gt_cuda_make_backend(int device, char* err,
                                                                   std::size_t err_len);
}
