// Backend selection and the wire-encoding helpers shared by every backend.
#include "kernels/backend.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iterator>
#include <string>

#include "base/enum_names.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#if defined(GT_HAVE_CUDA)
#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "kernels/cuda/cuda_factory.hpp"
#endif

namespace gossiptrain::kernels {

namespace {
constexpr std::string_view kPrecisionNames[] = {"fp32", "tf32", "bf16"};
static_assert(std::size(kPrecisionNames) == base::enum_count(Precision::Fp32, Precision::Bf16));
constexpr std::string_view kWireNames[] = {"fp32", "fp16", "bf16", "int8", "int4", "int2"};
static_assert(std::size(kWireNames) == base::enum_count(Wire::Fp32, Wire::Int2));
constexpr std::string_view kBackendNames[] = {"auto", "cpu", "cuda"};
static_assert(std::size(kBackendNames) == base::enum_count(BackendKind::Auto, BackendKind::Cuda));
}  // namespace

std::string_view to_string(BackendKind k) {
  return base::enum_name(k, BackendKind::Auto, kBackendNames);
}

void from_string(std::string_view text, BackendKind& out) {
  if (auto k = base::enum_from_name(text, BackendKind::Auto, kBackendNames)) {
    out = *k;
    return;
  }
  throw std::invalid_argument("unknown backend '" + std::string(text) +
                              "' (expected auto, cpu or cuda)");
}

Precision parse_precision(std::string_view s) {
  if (auto p = base::enum_from_name(s, Precision::Fp32, kPrecisionNames)) return *p;
  throw std::invalid_argument("unknown precision '" + std::string(s) +
                              "' (expected fp32, tf32 or bf16)");
}

std::string_view precision_name(Precision p) {
  return base::enum_name(p, Precision::Fp32, kPrecisionNames);
}

std::string_view wire_name(Wire w) { return base::enum_name(w, Wire::Fp32, kWireNames); }

std::size_t encoded_size(Wire w, std::size_t n) {
  switch (w) {
    case Wire::Fp32: return n * 4;
    case Wire::Fp16:
    case Wire::Bf16: return n * 2;
    case Wire::Int8:
    case Wire::Int4:
    case Wire::Int2: {
      const std::size_t per_byte = wire_values_per_byte(w);
      return (n + kInt8BlockSize - 1) / kInt8BlockSize * sizeof(float) + (n + per_byte - 1) / per_byte;
    }
  }
  throw std::invalid_argument("encoded_size: unknown wire encoding");
}

#if defined(GT_HAVE_CUDA)
namespace {

// The CUDA backend module, loaded once and never unloaded (its backends may live until exit).
struct CudaModule {
  decltype(&gt_cuda_device_count) device_count = nullptr;
  decltype(&gt_cuda_make_backend) make = nullptr;
  std::string error;  // why it could not be loaded; empty when it was
};

// Where the module may be: $GOSSIPTRAIN_CUDA_MODULE alone when it is set; else relative to the
// program's own folder: ../lib/gossiptrain (build/apps/X -> build/lib/gossiptrain, and an installed
// PREFIX/bin/X -> PREFIX/lib/gossiptrain), then the program's folder itself. No build path is
// compiled in.
std::vector<std::string> module_candidates() {
  if (const char* env = std::getenv("GOSSIPTRAIN_CUDA_MODULE"); env && *env) return {env};
  std::vector<std::string> c;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    c.push_back((exe.parent_path().parent_path() / "lib" / "gossiptrain" / GT_CUDA_MODULE_NAME)
                    .string());
    c.push_back((exe.parent_path() / GT_CUDA_MODULE_NAME).string());
  }
  return c;
}

const CudaModule& cuda_module() {
  static const CudaModule m = [] {
    CudaModule r;
    std::string tried;
    // Without an NVIDIA device node there is nothing to find, and loading the module would map
    // cuBLAS for nothing (a "--backend auto" peer on a machine without a GPU).
    std::error_code ec;
    if (!std::getenv("GOSSIPTRAIN_CUDA_MODULE") && !std::filesystem::exists("/dev/nvidiactl", ec) &&
        !std::filesystem::exists("/dev/dxg", ec)) {
      r.error = "no NVIDIA device node (/dev/nvidiactl)";
      return r;
    }
    for (const auto& path : module_candidates()) {
      if (::access(path.c_str(), R_OK) != 0) {
        tried += "; " + path + ": not found";
        continue;
      }
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* e = ::dlerror();
        tried += "; " + path + ": " + (e ? e : "dlopen failed");
        continue;
      }
      r.device_count =
          reinterpret_cast<decltype(r.device_count)>(::dlsym(h, "gt_cuda_device_count"));
      r.make = reinterpret_cast<decltype(r.make)>(::dlsym(h, "gt_cuda_make_backend"));
      if (r.device_count && r.make) {
        spdlog::debug("CUDA backend module loaded from {}", path);
        return r;
      }
      tried += "; " + path + ": entry points missing";
      r.device_count = nullptr;
      r.make = nullptr;
    }
    r.error = "the CUDA backend module (" + std::string(GT_CUDA_MODULE_NAME) +
              ") could not be loaded (" + tried.substr(2) + "; GOSSIPTRAIN_CUDA_MODULE names it)";
    return r;
  }();
  return m;
}

int cuda_device_count() noexcept {
  try {
    const CudaModule& m = cuda_module();
    return m.device_count ? m.device_count() : 0;
  } catch (...) {
    return 0;
  }
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const CudaModule& m = cuda_module();
  if (!m.make) throw BackendError(m.error);
  char err[512] = {0};
  std::unique_ptr<Backend> be(m.make(device, err, sizeof err));
  if (!be) throw BackendError(err[0] ? err : "the CUDA backend could not be created");
  return be;
}

}  // namespace
#endif

int cuda_devices() {
#if defined(GT_HAVE_CUDA)
  return cuda_device_count();
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_devices() > 0; }

std::unique_ptr<Backend> make_backend(std::string_view name, int device) {
  BackendKind kind{};
  from_string(name, kind);
  return make_backend(kind, device);
}

std::unique_ptr<Backend> make_backend(BackendKind kind, int device) {
  if (device < 0) throw BackendError("device number must be >= 0, got " + std::to_string(device));
  if (kind == BackendKind::Cpu) return std::make_unique<CpuBackend>();
  if (kind == BackendKind::Cuda) {
#if defined(GT_HAVE_CUDA)
    const int n = cuda_device_count();
    if (n <= 0) {
      const std::string& why = cuda_module().error;
      throw BackendError("backend 'cuda' requested but no CUDA device is visible" +
                         (why.empty() ? std::string() : " (" + why + ")"));
    }
    if (device >= n)
      throw BackendError("CUDA device " + std::to_string(device) + " requested but " +
                         std::to_string(n) + " device" + (n == 1 ? " is" : "s are") +
                         " visible (0.." + std::to_string(n - 1) + ")");
    return make_cuda_backend(device);
#else
    throw BackendError(
        "backend 'cuda' requested but this build has no CUDA support "
        "(configure with nvcc available and GT_CUDA=ON)");
#endif
  }
  if (kind == BackendKind::Auto) {
    std::unique_ptr<Backend> be;
#if defined(GT_HAVE_CUDA)
    if (cuda_device_count() > device) {
      try {
        be = make_cuda_backend(device);
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
  throw std::invalid_argument("unknown backend kind " + std::to_string(int(kind)));
}

}  // namespace gossiptrain::kernels
