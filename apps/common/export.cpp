// safetensors export of a model (see common_export.hpp).
#include "apps/common/export.hpp"

#include <vector>

#include <spdlog/spdlog.h>

#include "core/safetensors.hpp"

namespace gossiptrain::apps {

void export_model(kernels::Backend& be, const core::Model& model, const std::string& path,
                  std::map<std::string, std::string> metadata) {
  std::vector<float> host(model.num_params());
  be.download(host.data(), model.params(), host.size() * sizeof(float));
  const auto tensors = core::model_tensors(model.layers(), host.data(), host.size());
  metadata["model"] = model.spec();
  metadata["format"] = "gossiptrain";
  // How to feed it: PyTorch layout (conv OIHW, NCHW flattening before the first dense layer).
  metadata["input_layout"] = "NCHW";
  core::write_safetensors(path, tensors, metadata);
  spdlog::info("exported the model ({} tensors, {} parameters) to {}", tensors.size(), host.size(),
               path);
}

}  // namespace gossiptrain::apps
