// Backend selection and the wire-encoding helpers shared by every backend.
#include "kernels/backend.hpp"

#include <spdlog/spdlog.h>

#include <string>

#include "kernels/cpu/cpu_backend.hpp"
#if defined(GT_HAVE_CUDA)
#include "kernels/cuda/cuda_factory.hpp"
#endif

namespace gossiptrain::kernels {

Wire parse_wire(std::string_view s) {
  if (s == "fp32") return Wire::Fp32;
  if (s == "fp16") return Wire::Fp16;
  if (s == "bf16") return Wire::Bf16;
  if (s == "int8") return Wire::Int8;
  throw std::invalid_argument("unknown wire encoding '" + std::string(s) +
                              "' (expected fp32, fp16, bf16 or int8)");
}

std::string_view wire_name(Wire w) {
  switch (w) {
    case Wire::Fp32: return "fp32";
    case Wire::Fp16: return "fp16";
    case Wire::Bf16: return "bf16";
    case Wire::Int8: return "int8";
  }
  return "unknown";
}

std::size_t encoded_size(Wire w, std::size_t n) {
  switch (w) {
    case Wire::Fp32: return n * 4;
    case Wire::Fp16:
    case Wire::Bf16: return n * 2;
    case Wire::Int8: return (n + kInt8BlockSize - 1) / kInt8BlockSize * sizeof(float) + n;
  }
  throw std::invalid_argument("encoded_size: unknown wire encoding");
}

bool cuda_available() {
#if defined(GT_HAVE_CUDA)
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(std::string_view name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  if (name == "cuda") {
#if defined(GT_HAVE_CUDA)
    if (cuda_device_count() <= 0)
      throw BackendError("backend 'cuda' requested but no CUDA device is visible");
    return make_cuda_backend();
#else
    throw BackendError("backend 'cuda' requested but this build has no CUDA support "
                       "(configure with nvcc available and GT_CUDA=ON)");
#endif
  }
  if (name == "auto") {
    std::unique_ptr<Backend> be;
#if defined(GT_HAVE_CUDA)
    if (cuda_available()) {
      try {
        be = make_cuda_backend();
      } catch (const BackendError& e) {
        // "auto" promises a working backend: a device that is visible but unusable (driver
        // mismatch, out of memory) is worth a warning, not a failed run.
        spdlog::warn("backend auto: CUDA device present but unusable ({}); using cpu", e.what());
      }
    }
#endif
    if (!be) be = std::make_unique<CpuBackend>();
    spdlog::info("backend auto -> {} ({})", be->name(), be->device());
    return be;
  }
  throw std::invalid_argument("unknown backend '" + std::string(name) +
                              "' (expected auto, cpu or cuda)");
}

}  // namespace gossiptrain::kernels
