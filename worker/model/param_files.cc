#include "worker/model/param_files.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/data/npy_format.h"
#include "worker/model/layers.h"
#include "worker/model/model.h"

namespace pstrain {

void save_params(const std::string& dir, const Layout& layout, const float* params) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw Error("cannot create --save-params dir '" + dir + "': " + error.message());
  for (const TensorSpec& t : layout.tensors()) write_npy(dir + "/" + t.name + ".npy", t.shape, params + t.offset);
  PSLOG(INFO) << "saved " << layout.tensors().size() << " variables to " << dir;
}

void load_params(const std::string& dir, const Layout& layout, float* params) {
  for (const TensorSpec& t : layout.tensors()) {
    const std::string path = dir + "/" + t.name + ".npy";
    std::vector<size_t> shape;
    std::vector<float> values;
    try {
      values = read_npy(path, &shape);
    } catch (const Error& e) {
      throw Error(std::string("--init-params: ") + e.what());
    }
    if (shape != t.shape) {
      throw Error("--init-params: " + path + " has shape " + shape_text(shape) + " but the model's " + t.name +
                  " is " + shape_text(t.shape) + " (is --model/--hidden the one it was trained with?)");
    }
    std::copy(values.begin(), values.end(), params + t.offset);
  }
}

int saved_classes(const std::string& model, const std::vector<int>& hidden, const std::string& dir) {
  const std::vector<LayerSpec> layers = parse_model(Network::spec_of(model, hidden, 2));
  if (!model.empty() && layers.back().kind == LayerKind::kDense) return static_cast<int>(layers.back().args[0]);
  const long with_params = std::count_if(layers.begin(), layers.end(),
                                         [](const LayerSpec& l) { return l.kind == LayerKind::kDense || l.kind == LayerKind::kConv; });
  const std::string path = dir + "/layer" + std::to_string(with_params - 1) + ".bias.npy";
  std::vector<size_t> shape;
  try {
    read_npy(path, &shape);
  } catch (const Error& e) {
    throw Error(std::string("--init-params: ") + e.what());
  }
  if (shape.size() != 1 || shape[0] < 2) throw Error("--init-params: " + path + " is not the bias of a last layer");
  return static_cast<int>(shape[0]);
}

}  // namespace pstrain
