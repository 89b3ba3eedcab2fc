// The model out: a trained model or a checkpoint's parameters as safetensors, with the model spec
// and the run's figures in the metadata.
#pragma once

#include <map>
#include <string>

#include "core/model.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::apps {

// Writes the model's parameters (copied from the backend's device) to path. Throws
// core::SafetensorsError.
void export_model(kernels::Backend& be, const core::Model& model, const std::string& path,
                  std::map<std::string, std::string> metadata);

}  // namespace gossiptrain::apps
